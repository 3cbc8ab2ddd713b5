"""problems stage."""
