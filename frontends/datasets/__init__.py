"""PyTorch datasets over epochfs:// (map-style over a prefix, iterable over tar shards)."""
