"""evaluate stage."""
