"""DataNode durability (issue 18): a block is acknowledged only once its copy is on disk, and concurrent writes
share their WAL syncs (group commit). Observed through RocksDB's own statistics on a real store."""
from __future__ import annotations

import asyncio
import os

from epochfs.common import messages as m
from epochfs.common.blocks import crc32c
from epochfs.common.kv import RocksKV, RocksSpace
from epochfs.datanode.api import make_handlers
from epochfs.datanode.blockstore import BlockStore


def wal_synced(kv: RocksKV) -> int:
    return kv.statistics().get("rocksdb.wal.synced", 0)


def test_put_and_put_replica_answer_only_after_the_wal_is_synced(tmp_path):
    kv = RocksKV.open(tmp_path / "blocks", bulk=True, statistics=True)
    try:
        store = BlockStore(kv)
        h = make_handlers(store, replicator=None, spawn=None)
        data = os.urandom(110 << 10)
        store.put(1, data, crc32c(data))
        assert wal_synced(kv) == 0  # a write on its own is in the page cache only

        async def main():
            await h[m.Put](m.Put(block_id=2, crc=crc32c(data)), data)  # async policy, no secondaries
            after_put = wal_synced(kv)
            await h[m.PutReplica](m.PutReplica(block_id=3, crc=crc32c(data)), data)
            return after_put, wal_synced(kv)

        after_put, after_replica = asyncio.run(main())
        assert after_put >= 1 and after_replica > after_put
    finally:
        kv.close()


def test_concurrent_puts_share_wal_syncs(tmp_path):
    kv = RocksKV.open(tmp_path / "blocks", bulk=True, statistics=True)
    try:
        store = BlockStore(kv)
        h = make_handlers(store, replicator=None, spawn=None)
        blobs = [os.urandom(110 << 10) for _ in range(32)]

        async def main():
            await asyncio.gather(*(h[m.Put](m.Put(block_id=100 + i, crc=crc32c(b)), b)
                                   for i, b in enumerate(blobs)))

        asyncio.run(main())
        n = wal_synced(kv)
        assert 1 <= n <= 4, f"{n} WAL syncs for 32 concurrent puts: no group commit"
        assert store.synced.syncs == n
        for i, b in enumerate(blobs):
            assert b"".join(store.read(100 + i)) == b
    finally:
        kv.close()


def test_a_store_that_refuses_writes_makes_the_datanode_unavailable_for_them(tmp_path):
    """RocksDB refuses every write once a compaction met a corrupt block in one of its files (a background error):
    the DataNode answers puts with Unavailable, which the gateway answers by writing to another node, instead of
    an internal error that failed the PUT."""
    import pytest

    from epochfs.common import errors
    from epochfs.datanode import keys

    path = tmp_path / "blocks"
    kv = RocksKV.open(path, bulk=True)
    store = BlockStore(kv)
    blobs = {bid: os.urandom(110 << 10) for bid in range(1, 9)}
    for bid, b in blobs.items():
        store.put(bid, b, crc32c(b))
    kv.flush_memtables()
    kv.close()
    for f in path.glob("*.sst"):  # a flipped byte inside block 4's data, in RocksDB's file
        raw = bytearray(f.read_bytes())
        at = raw.find(blobs[4][5000:5064])
        if at >= 0:
            raw[at + 10] ^= 0x5A
            f.write_bytes(bytes(raw))
    kv = RocksKV.open(path, bulk=True)
    try:
        store = BlockStore(kv)
        with pytest.raises(errors.CorruptBlock):
            store.read(4)
        store.put(4, blobs[4], crc32c(blobs[4]))  # the repair: a good copy over it, in a newer file
        kv.flush_memtables()
        assert b"".join(store.read(4)) == blobs[4]
        kv._db.get_column_family(RocksSpace.CHUNKS).compact_range(keys.CHUNKS, None)  # merging the files meets the damaged block: no more writes
        h = make_handlers(store, replicator=None, spawn=None)
        b = os.urandom(1000)
        with pytest.raises(errors.Unavailable):
            asyncio.run(h[m.Put](m.Put(block_id=99, crc=crc32c(b)), b))
        with pytest.raises(errors.Unavailable):
            asyncio.run(h[m.PutReplica](m.PutReplica(block_id=4, crc=crc32c(blobs[4])), blobs[4]))
        assert b"".join(store.read(5)) == blobs[5]  # reads of good blocks still work
    finally:
        try:
            kv.close()
        except Exception:  # noqa: BLE001 -- closing flushes, which the background error refuses too
            pass


def test_the_scrubber_lists_and_counts_every_block_past_a_damaged_block_index(tmp_path):
    """A flipped byte in the RocksDB block holding some of the block index (the metas): RocksDB stops an iterator
    there. The scrubber still goes through every block (listing the index past the damage unchecked), counts the
    ones whose index entry or data can't be read as bad, and finishes its sweep."""
    from epochfs.datanode.scrubber import Scrubber

    path = tmp_path / "blocks"
    kv = RocksKV.open(path, bulk=True)
    store = BlockStore(kv)
    blobs = {bid: os.urandom(3000) for bid in range(1, 201)}
    for bid, b in blobs.items():
        store.put(bid, b, crc32c(b))
    kv.flush_memtables()
    kv.close()
    victim = 100
    meta = len(blobs[victim]).to_bytes(8, "big") + crc32c(blobs[victim]).to_bytes(4, "big")
    hits = 0
    for f in path.glob("*.sst"):
        raw = bytearray(f.read_bytes())
        at = raw.find(meta)
        if at >= 0:
            raw[at + 9] ^= 0x5A  # in the crc of block 100's meta
            f.write_bytes(bytes(raw))
            hits += 1
    assert hits == 1
    kv = RocksKV.open(path, bulk=True)
    try:
        store = BlockStore(kv)
        assert not store.has(0)
        sc = Scrubber(store, bytes_per_s=1 << 30)
        sc.start_job("j")
        sc.scan(1 << 30)
        assert sc.job["done"] and sc.totals["sweeps"] == 1
        assert sc.job["blocks"] == len(blobs), sc.job  # none skipped
        assert victim in store.bad and sc.job["bad"] == len(store.bad) >= 1
        good = [bid for bid in blobs if bid not in store.bad]
        assert good  # one 4 KiB RocksDB block holds the metas of ~160 blocks: those are bad, the rest read
        for bid in good:
            assert b"".join(store.read(bid)) == blobs[bid]
        b = blobs[victim]
        store.put(victim, b, crc32c(b))  # a repair rewrites the index entry too
        assert b"".join(store.read(victim)) == b and victim not in store.bad
    finally:
        kv.close()
