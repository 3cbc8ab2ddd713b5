"""policies/builtin stage."""
