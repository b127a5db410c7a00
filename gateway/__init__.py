"""epochfs gateway."""
