"""epochfs datanode."""
