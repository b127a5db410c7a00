import pytest

from epochfs.common import errors
from epochfs.common.blocks import crc32c
from epochfs.common.kv import MemoryKV
from epochfs.datanode import keys
from epochfs.datanode.blockstore import BlockStore


def test_put_read_and_replication_jobs_in_one_batch():
    s = BlockStore(MemoryKV())
    data = b"x" * 1000
    s.put(5, data, crc32c(data), [(2, "127.0.0.1:2"), (3, "127.0.0.1:3")])
    assert bytes(s.read(5)) == data and bytes(s.read(5, 10, 5)) == data[10:15]
    assert sorted((t, b) for t, b, _ in s.due_replications(10)) == [(2, 5), (3, 5)]
    s.complete(2, 5)
    assert [(t, b) for t, b, _ in s.due_replications(10)] == [(3, 5)]


def test_wrong_crc_on_put_is_refused():
    s = BlockStore(MemoryKV())
    with pytest.raises(errors.CorruptBlock):
        s.put(1, b"abc", 12345)
    assert not s.has(1)


def test_flipped_byte_is_detected_on_read():
    kv = MemoryKV()
    s = BlockStore(kv)
    s.put(1, b"abcdef", crc32c(b"abcdef"))
    raw = bytearray(kv.get(keys.block(1)))
    raw[-1] ^= 0xFF
    kv.put(keys.block(1), bytes(raw))
    with pytest.raises(errors.CorruptBlock):
        s.read(1)


def test_delete_drops_block_and_jobs():
    s = BlockStore(MemoryKV())
    s.put(1, b"abc", crc32c(b"abc"), [(2, "a:1")])
    s.delete([1])
    assert not s.has(1) and s.due_replications(10) == [] and s.used == 0
