"""The DataNode's RPC handlers: block put/get for the gateway, put_replica for peers, read_tokened for native
clients holding a gateway's read token."""
from __future__ import annotations

import asyncio

from epochfs.common import errors, readtoken
from epochfs.common import messages as m

from .blockstore import BlockStore
from .replicator import FAST_PATH_GRACE_S


# ops a native client may call on a connection without the cluster secret (each checks its own token)
OPEN_OPS = frozenset({"read_tokened"})


def make_handlers(store: BlockStore, replicator, spawn, capacity: int = 0, secret: str = "") -> dict:
    def check_room(block_id: int, size: int) -> None:
        """A node with a capacity limit (DN_CAPACITY_BYTES) refuses a new block that would take it over; the
        gateway then writes elsewhere, a primary's push is retried later (the NameNode places on nodes with room)."""
        if capacity and store.used + size > capacity and not store.has(block_id):
            raise errors.NodeFull(f"block {block_id}: node full ({store.used} of {capacity} bytes used)")

    async def put(a, payload):
        """Store a block as its primary and acknowledge; replication to a["secondaries"] ([[node_id, addr], ...])
        follows in the background: pushed from memory at once, with durable jobs queued in the same batch.

        a["acks"] = N > 1 (write policy sync:N) acknowledges only once N replicas, this one included, are durable;
        if fewer can be written this copy is dropped again and NotEnoughReplicas tells the gateway to give up.
        Durable means on disk: each copy's WAL is fsynced (group commit, common/kv.WalSync) before it counts, and
        with `async` too this copy is on disk before the acknowledgement."""
        bid, crc = int(a["block_id"]), int(a["crc"])
        targets = [(int(t), addr) for t, addr in a.get("secondaries", [])]
        acks = int(a.get("acks", 1))
        if acks > 1 + len(targets):
            raise errors.NotEnoughReplicas(f"block {bid}: the write policy requires {acks} replicas and only "
                                           f"{1 + len(targets)} nodes were placed")
        check_room(bid, len(payload))
        store.store(bid, payload, crc, targets, jobs_due_in=FAST_PATH_GRACE_S if targets else 0.0)
        if acks > 1:
            try:  # this copy's fsync overlaps the pushes; each secondary acknowledges once its copy is on disk
                await asyncio.gather(store.synced(), replicator.push_acked(bid, payload, crc, targets, acks - 1))
            except errors.NotEnoughReplicas:
                store.delete([bid])
                raise
            return {}
        if targets:
            spawn(replicator.push_now(bid, payload, crc, targets))
        await store.synced()  # async: this copy is on disk before the acknowledgement, the secondaries' follow
        return {}

    async def put_replica(a, payload):
        """A replica from the primary (fresh=True: the write's own replication) or a repair copy ordered by the
        NameNode. A fresh push that lost the race with a delete order is dropped instead of becoming an orphan."""
        bid = int(a["block_id"])
        if not (a.get("fresh") and store.recently_deleted(bid)):
            check_room(bid, len(payload))
            store.store(bid, payload, int(a["crc"]))
            await store.synced()  # on disk before the primary counts it (sync:N) or completes its job
        return {}

    async def put_replicas(a, payload):
        """Several blocks in one call (a NameNode copy order: re-replication, read repair, rebalance), each stored
        like a repair copy of put_replica: a["blocks"] = [[block_id, crc, size], ...], their bytes back to back in the
        payload. Answers "errs" {index: error class} for the blocks not stored (no room, CRC mismatch)."""
        heads = a.get("blocks")
        if not isinstance(heads, list) or sum(int(h[2]) for h in heads) != len(payload):
            raise errors.InvalidInput("put_replicas: the block sizes do not add up to the payload")
        mv, off, errs = memoryview(payload), 0, {}
        for i, (bid, crc, n) in enumerate(heads):
            data, off = mv[off:off + int(n)], off + int(n)
            try:
                check_room(int(bid), int(n))
                store.store(int(bid), data, int(crc))
            except errors.DomainError as e:
                errs[str(i)] = type(e).__name__
        return {"errs": errs}

    async def get(a, _):
        return {}, store.read(int(a["block_id"]), int(a.get("offset", 0)), int(a.get("length", -1)))

    async def get_many(a, _):
        """Several (block_id, offset, length) reads in one round trip, for the gateway's batch read: the reply
        payload is the pieces back to back, "lens" their sizes; a piece that failed has length -1 and its error
        in "errs" ({str(index): [class, message]}), so the caller retries just that one on another replica."""
        lens, errs, out = [], {}, []
        for i, (bid, off, n) in enumerate(a["reads"]):
            try:
                bufs = store.read(int(bid), int(off), int(n))
            except errors.DomainError as e:
                lens.append(-1)
                errs[str(i)] = [type(e).__name__, e.message]  # JSON keys are strings (orjson refuses ints)
                continue
            lens.append(sum(len(b) for b in bufs))
            out += bufs
        return {"lens": lens, "errs": errs}, out

    async def read_tokened(a, _):
        """get_many for a native client (a loader reading straight from the DataNodes): a["grant"] is the gateway's
        read token (common/readtoken.py), which must cover every block read. The client reads a piece this node
        fails from another replica, but can't tell the NameNode: blocks whose copy here is bad are noted for the
        heartbeat to report."""
        readtoken.check(secret, a.get("grant") or {}, {int(r[0]) for r in a["reads"]})
        head, out = await get_many(a, _)
        for i, (cls, _msg) in head["errs"].items():
            bid = int(a["reads"][int(i)][0])
            if cls == "CorruptBlock" or (cls == "NoSuchBlock" and store.has(bid)):
                store.bad.add(bid)
        return head, out

    async def delete(a, _):
        store.delete([int(b) for b in a["blocks"]])
        return {}

    async def has(req: m.Has, _) -> m.HasBlocks:
        return m.HasBlocks(has=[store.has(b) for b in req.blocks])

    async def blocks(a, _):
        return {"blocks": store.block_ids()}

    async def replicate_once(a, _):
        s = await replicator.run_once(everything=True)
        return {"ok": s.ok, "failed": s.failed}

    return {f.__name__: f for f in (put, put_replica, put_replicas, get, get_many, read_tokened, delete, blocks,
                                    replicate_once)} | {m.Has: has}
