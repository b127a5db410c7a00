"""epochfs gateway/s3."""
