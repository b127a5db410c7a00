import pytest

from epochfs.common import errors
from epochfs.common.blocks import crc32c
from epochfs.common.kv import MemoryKV
from epochfs.datanode import keys
from epochfs.datanode.blockstore import BlockStore


def joined(bufs) -> bytes:
    return b"".join(bytes(b) for b in bufs)


def test_put_read_and_replication_jobs_in_one_batch():
    s = BlockStore(MemoryKV())
    data = b"x" * 1000
    s.put(5, data, crc32c(data), [(2, "127.0.0.1:2"), (3, "127.0.0.1:3")])
    assert joined(s.read(5)) == data and joined(s.read(5, 10, 5)) == data[10:15]
    assert sorted((t, b) for t, b, _ in s.due_replications(10)) == [(2, 5), (3, 5)]
    s.complete(2, 5)
    assert [(t, b) for t, b, _ in s.due_replications(10)] == [(3, 5)]


def test_wrong_crc_on_put_is_refused():
    s = BlockStore(MemoryKV())
    with pytest.raises(errors.CorruptBlock):
        s.put(1, b"abc", 12345)
    assert not s.has(1)


def test_flipped_byte_is_detected_on_read_of_its_chunk_only():
    kv = MemoryKV()
    s = BlockStore(kv, chunk_size=4)
    data = b"abcdefghij"  # chunks abcd efgh ij
    s.put(1, data, crc32c(data))
    raw = bytearray(kv.get(keys.chunk(1, 1)))
    raw[-1] ^= 0xFF
    kv.put(keys.chunk(1, 1), bytes(raw))
    assert joined(s.read(1, 0, 4)) == b"abcd" and joined(s.read(1, 8)) == b"ij"
    with pytest.raises(errors.CorruptBlock):
        s.read(1, 2, 3)


def test_ranges_across_chunks():
    s = BlockStore(MemoryKV(), chunk_size=7)
    data = bytes(range(256)) * 3
    s.put(9, data, crc32c(data))
    for off, n in [(0, -1), (0, 7), (3, 11), (6, 1), (7, 7), (700, 100), (767, 1), (768, 5)]:
        assert joined(s.read(9, off, n)) == (data[off:] if n < 0 else data[off:off + n]), (off, n)
    crc, chunks = s.read_raw(9)
    assert crc == crc32c(data) and joined(chunks) == data


def test_wrong_combined_crc_is_refused_for_multi_chunk_blocks():
    s = BlockStore(MemoryKV(), chunk_size=3)
    with pytest.raises(errors.CorruptBlock):
        s.put(2, b"abcdefgh", crc32c(b"abcdefgX"))
    assert not s.has(2) and s.used == 0


def test_delete_drops_block_and_jobs():
    s = BlockStore(MemoryKV())
    s.put(1, b"abc", crc32c(b"abc"), [(2, "a:1")])
    s.delete([1])
    assert not s.has(1) and s.due_replications(10) == [] and s.used == 0


def test_deleted_block_is_remembered_so_a_late_replica_push_is_dropped():
    s = BlockStore(MemoryKV())
    s.put(7, b"abc", crc32c(b"abc"))
    assert not s.recently_deleted(7)
    s.delete([7])
    assert s.recently_deleted(7) and not s.has(7)
