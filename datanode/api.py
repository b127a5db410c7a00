"""The DataNode's RPC handlers: block put/get for the gateway, put_replica for peers."""
from __future__ import annotations

from .blockstore import BlockStore
from .replicator import FAST_PATH_GRACE_S


def make_handlers(store: BlockStore, replicator, spawn) -> dict:
    async def put(a, payload):
        """Store a block as its primary and acknowledge; replication to a["secondaries"] ([[node_id, addr], ...])
        follows in the background: pushed from memory at once, with durable jobs queued in the same batch."""
        bid, crc = int(a["block_id"]), int(a["crc"])
        targets = [(int(t), addr) for t, addr in a.get("secondaries", [])]
        store.put(bid, payload, crc, targets, jobs_due_in=FAST_PATH_GRACE_S if targets else 0.0)
        if targets:
            spawn(replicator.push_now(bid, payload, crc, targets))
        return {}

    async def put_replica(a, payload):
        """A replica from the primary (fresh=True: the write's own replication) or a repair copy ordered by the
        NameNode. A fresh push that lost the race with a delete order is dropped instead of becoming an orphan."""
        bid = int(a["block_id"])
        if not (a.get("fresh") and store.recently_deleted(bid)):
            store.put(bid, payload, int(a["crc"]))
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
        s = await replicator.run_once(everything=True)
        return {"ok": s.ok, "failed": s.failed}

    return {f.__name__: f for f in (put, put_replica, get, delete, has, blocks, replicate_once)}
