"""Code shared by every epochfs service and frontend."""
