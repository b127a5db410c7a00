"""RocksDB key layout of a DataNode (integers big-endian, so scans come back sorted).

  m <block:8>               -> block size:8 + crc32c of the whole block:4 (big-endian) [+ layout:1 (1 bulk + its
                               generation, 2 chunks space by block id, 3 chunks space + the arrival number:8, 4 a file
                               of its own: arrival number:8 + each chunk's crc32c:4, 5 in a pack: pack:8 + offset:8 +
                               each chunk's crc32c:4)]
  b <block:8> <chunk:4>     -> crc32c:4 + the chunk's data (CHUNK_SIZE bytes, the last one shorter)
  q <seq:8> <chunk:4>       -> the same, for a small block in the chunks key space, under the store's arrival number of
                               that copy (its meta says which): these keys only grow, so the key space's flushed
                               files never overlap and compaction only moves them
  r <target:4> <block:8>    -> replication job: JSON {"a": target address, "n": tries, "due": unix time, "t": queued at}
  f <seq:8>                 -> block:8: the file of copy number `seq` (layout 4) is to be deleted unless the block's
                               meta names it (written before the file, removed with the meta's batch; written when
                               that copy is deleted or replaced)
  p <block:8>               -> b"": the block's bulk chunks are to be dropped unless its meta says "bulk" (written
                               before an ingest and removed with the meta's batch; written when a bulk block is deleted)

The chunks of blocks of at least BlockStore.bulk_min bytes live under the same `b` keys in the store's separate bulk
key space (a column family, one ingested file per block; see common/kv.RocksBulk); their meta has layout 1. Such
blocks are now written as plain files (layout 4, datanode/blockstore.py FILED); the bulk space is still read.
"""
from __future__ import annotations


def meta(block_id: int) -> bytes:
    return b"m" + block_id.to_bytes(8, "big")


METAS = b"m"


def chunk(block_id: int, index: int) -> bytes:
    return b"b" + block_id.to_bytes(8, "big") + index.to_bytes(4, "big")


CHUNKS = b"b"


def seq_chunks(seq: int) -> bytes:
    """The prefix of every chunk key of the small block copy stored as number `seq` (chunks key space)."""
    return b"q" + seq.to_bytes(8, "big")


SEQ_CHUNKS = b"q"


def chunks_of(block_id: int) -> bytes:
    """The prefix of every chunk key of a block."""
    return b"b" + block_id.to_bytes(8, "big")


def repl(target: int, block_id: int) -> bytes:
    return b"r" + target.to_bytes(4, "big") + block_id.to_bytes(8, "big")


REPL = b"r"
PROBE = b"w"  # put and deleted by BlockStore.probe_writes: never there for long


def pending(block_id: int) -> bytes:
    return b"p" + block_id.to_bytes(8, "big")


PENDING = b"p"


def doomed_file(seq: int) -> bytes:
    return b"f" + seq.to_bytes(8, "big")


DOOMED_FILES = b"f"
