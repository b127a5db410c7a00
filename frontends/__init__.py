"""epochfs frontends."""
