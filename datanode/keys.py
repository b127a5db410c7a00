"""RocksDB key layout of a DataNode (integers big-endian, so scans come back sorted).

  m <block:8>               -> block size:8 + crc32c of the whole block:4 (big-endian)
  b <block:8> <chunk:4>     -> crc32c:4 + the chunk's data (CHUNK_SIZE bytes, the last one shorter)
  r <target:4> <block:8>    -> replication job: JSON {"a": target address, "n": tries, "due": unix time}
"""
from __future__ import annotations


def meta(block_id: int) -> bytes:
    return b"m" + block_id.to_bytes(8, "big")


METAS = b"m"


def chunk(block_id: int, index: int) -> bytes:
    return b"b" + block_id.to_bytes(8, "big") + index.to_bytes(4, "big")


CHUNKS = b"b"


def repl(target: int, block_id: int) -> bytes:
    return b"r" + target.to_bytes(4, "big") + block_id.to_bytes(8, "big")


REPL = b"r"
