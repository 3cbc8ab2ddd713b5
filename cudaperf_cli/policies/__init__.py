"""policies stage."""
