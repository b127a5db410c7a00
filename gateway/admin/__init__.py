"""REST admin API under /admin/v1."""
