"""RocksDB key layout of a DataNode (integers big-endian, so scans come back sorted).

  b <block:8>               -> crc32c:4 (big-endian) + block data
  r <target:4> <block:8>    -> replication job: JSON {"a": target address, "n": tries, "due": unix time}
"""
from __future__ import annotations


def block(block_id: int) -> bytes:
    return b"b" + block_id.to_bytes(8, "big")


BLOCKS = b"b"


def repl(target: int, block_id: int) -> bytes:
    return b"r" + target.to_bytes(4, "big") + block_id.to_bytes(8, "big")


REPL = b"r"
