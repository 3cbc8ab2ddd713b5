"""build stage."""
