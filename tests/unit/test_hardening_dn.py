"""DataNode durability (issue 18): a block is acknowledged only once its copy is on disk, and concurrent writes
share their WAL syncs (group commit). Observed through RocksDB's own statistics on a real store."""
from __future__ import annotations

import asyncio
import os

from epochfs.common.blocks import crc32c
from epochfs.common.kv import RocksKV
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
            await h["put"]({"block_id": 2, "crc": crc32c(data)}, data)  # async policy, no secondaries
            after_put = wal_synced(kv)
            await h["put_replica"]({"block_id": 3, "crc": crc32c(data)}, data)
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
            await asyncio.gather(*(h["put"]({"block_id": 100 + i, "crc": crc32c(b)}, b)
                                   for i, b in enumerate(blobs)))

        asyncio.run(main())
        n = wal_synced(kv)
        assert 1 <= n <= 4, f"{n} WAL syncs for 32 concurrent puts: no group commit"
        assert store.synced.syncs == n
        for i, b in enumerate(blobs):
            assert b"".join(store.read(100 + i)) == b
    finally:
        kv.close()
