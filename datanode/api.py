"""The DataNode's RPC handlers: block put/get for the gateway, put_replica for peers."""
from __future__ import annotations

from .blockstore import BlockStore


def make_handlers(store: BlockStore, replicator, replicator_wake) -> dict:
    async def put(a, payload):
        """Store a block as its primary; replication to a["secondaries"] ([[node_id, addr], ...]) follows."""
        store.put(int(a["block_id"]), payload, int(a["crc"]), [(int(t), addr) for t, addr in a.get("secondaries", [])])
        if a.get("secondaries"):
            replicator_wake()
        return {}

    async def put_replica(a, payload):
        store.put(int(a["block_id"]), payload, int(a["crc"]))
        return {}

    async def get(a, _):
        return {}, store.read(int(a["block_id"]), int(a.get("offset", 0)), int(a.get("length", -1)))

    async def delete(a, _):
        store.delete([int(b) for b in a["blocks"]])
        return {}

    async def has(a, _):
        return {"has": [store.has(int(b)) for b in a["blocks"]]}

    async def blocks(a, _):
        return {"blocks": store.block_ids()}

    async def replicate_once(a, _):
        s = await replicator.run_once()
        return {"ok": s.ok, "failed": s.failed}

    return {f.__name__: f for f in (put, put_replica, get, delete, has, blocks, replicate_once)}
