"""The DataNode's RPC handlers: block put/get for the gateway, put_replica for peers, read_tokened and
write_tokened for native clients holding a gateway's read or write token."""
from __future__ import annotations

import asyncio

from epochfs.common import errors, readtoken, writetoken
from epochfs.common import messages as m
from epochfs.common.blocks import zeros
from epochfs.common.rpc import FileSpan

from .blockstore import BlockStore
from .replicator import FAST_PATH_GRACE_S


# ops a native client may call on a connection without the cluster secret (each checks its own token)
OPEN_OPS = frozenset({m.op_name(m.ReadTokened), m.op_name(m.WriteTokened)})
THREAD_MD5_BYTES = 256 << 10  # MD5 a block at least this large in a worker thread (hashlib lets go of the GIL)
DONE = m.Done()


def make_handlers(store: BlockStore, replicator, spawn, capacity: int = 0, secret: str = "",
                  node_id=lambda: None, max_block: int = 1 << 30) -> dict:
    """The handlers by request type. `node_id()`: this node's id once registered (a tokened write checks that the
    token places the block here). `max_block`: the largest block a put may name as zeros (the largest payload a
    request may carry)."""
    def content(req: m.Put | m.PutReplica, payload):
        """A put's block: the payload, or `req.zero` zero bytes (sent as their size: nothing in the payload)."""
        if not req.zero:
            return payload
        if len(payload) or req.zero > max_block:
            raise errors.InvalidInput(f"block {req.block_id}: a block of {req.zero} zeros with {len(payload)} bytes "
                                      f"of payload (at most {max_block} zeros, no payload)")
        return zeros(req.zero)

    def blocks_in(heads: list[m.ReplicaHead], payload, op: str) -> list:
        """The bytes of each block of a batch: its slice of the payload, or its zeros (`zero`: not in the payload)."""
        if sum(h.size for h in heads if not h.zero) != len(payload) or any(h.size < 0 for h in heads):
            raise errors.InvalidInput(f"{op}: the block sizes do not add up to the payload")
        if any(h.zero and h.size > max_block for h in heads):
            raise errors.InvalidInput(f"{op}: a block of zeros larger than {max_block} bytes")
        mv, off, out = memoryview(payload), 0, []
        for h in heads:
            if h.zero:
                out.append(zeros(h.size))
            else:
                out.append(mv[off:off + h.size])
                off += h.size
        return out

    def check_room(block_id: int, size: int) -> None:
        """A node with a capacity limit (DN_CAPACITY_BYTES) refuses a new block that would take it over; the
        gateway then writes elsewhere, a primary's push is retried later (the NameNode places on nodes with room)."""
        if capacity and store.used + size > capacity and not store.has(block_id):
            raise errors.NodeFull(f"block {block_id}: node full ({store.used} of {capacity} bytes used)")

    async def put(req: m.Put, payload) -> m.Done:
        """Store a block as its primary and acknowledge; replication to req.secondaries follows in the background:
        pushed from memory at once, with durable jobs queued in the same batch.

        req.acks = N > 1 (write policy sync:N) acknowledges only once N replicas, this one included, are durable;
        if fewer can be written this copy is dropped again and NotEnoughReplicas tells the gateway to give up.
        Durable means on disk: each copy's WAL is fsynced (group commit, common/kv.WalSync) before it counts, and
        with `async` too this copy is on disk before the acknowledgement."""
        bid, crc, acks = req.block_id, req.crc, req.acks
        payload = content(req, payload)
        targets = [(t.node, t.addr) for t in req.secondaries]
        if acks > 1 + len(targets):
            raise errors.NotEnoughReplicas(f"block {bid}: the write policy requires {acks} replicas and only "
                                           f"{1 + len(targets)} nodes were placed")
        check_room(bid, len(payload))
        await store.store(bid, payload, crc, targets, jobs_due_in=FAST_PATH_GRACE_S if targets else 0.0)
        if acks > 1:
            try:  # this copy's fsync overlaps the pushes; each secondary acknowledges once its copy is on disk
                await asyncio.gather(store.synced(), replicator.push_acked(bid, payload, crc, targets, acks - 1))
            except errors.NotEnoughReplicas:
                store.delete([bid])
                raise
            return DONE
        if targets:
            spawn(replicator.push_now(bid, payload, crc, targets))
        await store.synced()  # async: this copy is on disk before the acknowledgement, the secondaries' follow
        return DONE

    async def put_replica(req: m.PutReplica, payload) -> m.Done:
        """A replica from the primary (fresh: the write's own replication) or a repair copy ordered by the
        NameNode. A fresh push that lost the race with a delete order is dropped instead of becoming an orphan."""
        bid = req.block_id
        payload = content(req, payload)
        if not (req.fresh and store.recently_deleted(bid)):
            check_room(bid, len(payload))
            await store.store(bid, payload, req.crc)
            await store.synced()  # on disk before the primary counts it (sync:N) or completes its job
        return DONE

    async def put_many(req: m.PutMany, payload) -> m.Stored:
        """Many blocks as their primary (a gateway's batch PUT of small objects): all stored in one write batch with
        their replication jobs, then replicated as `put` does, one put_replicas call per secondary for the batch.
        Answers once `req.acks` copies of each are on disk (as put); a block that fails (CRC mismatch, no room, too
        few replicas for sync:N) is that block's error, the others are stored."""
        if sum(h.size for h in req.blocks) != len(payload) or any(h.size < 0 for h in req.blocks):
            raise errors.InvalidInput("put_many: the block sizes do not add up to the payload")
        if any(str(t) not in req.addrs for h in req.blocks for t in h.secondaries):
            raise errors.InvalidInput("put_many: a secondary without an address")
        acks = req.acks
        mv, off, errs, todo, where = memoryview(payload), 0, {}, [], []
        for i, h in enumerate(req.blocks):
            data, off = mv[off:off + h.size], off + h.size
            targets = [(t, req.addrs[str(t)]) for t in h.secondaries]
            try:
                if acks > 1 + len(targets):
                    raise errors.NotEnoughReplicas(f"block {h.id}: too few nodes placed for the write policy")
                check_room(h.id, h.size)
            except errors.DomainError as e:
                errs[i] = type(e).__name__
                continue
            todo.append((h.id, data, h.crc, targets))
            where.append(i)
        for j, err in (await store.store_many(todo, jobs_due_in=FAST_PATH_GRACE_S)).items():
            errs[where[j]] = err
        stored = [(blk, i) for blk, i in zip(todo, where) if i not in errs]
        if acks > 1:
            _, short = await asyncio.gather(store.synced(), replicator.push_many([b for b, _ in stored], acks - 1))
            if short:
                store.delete(sorted(short))
                errs.update({i: "NotEnoughReplicas" for (bid, *_), i in stored if bid in short})
            return m.Stored(errs=errs)
        if any(b[3] for b, _ in stored):
            spawn(replicator.push_many([b for b, _ in stored], 0))
        await store.synced()
        return m.Stored(errs=errs)

    async def put_replicas(req: m.PutReplicas, payload) -> m.Stored:
        """Several blocks in one call, their bytes back to back in the payload: a NameNode copy order
        (re-replication, read repair, rebalance), each stored like a repair copy of put_replica, or a primary's
        fresh copies of a put_many batch (`fresh`: one deleted meanwhile is dropped, as put_replica drops it; all in
        one write batch, answered once on disk). Answers the error class of each block not stored (no room, CRC
        mismatch)."""
        datas, errs = blocks_in(req.blocks, payload, "put_replicas"), {}
        if req.fresh:
            todo, where = [], []
            for i, (h, data) in enumerate(zip(req.blocks, datas)):
                if store.recently_deleted(h.id):
                    continue
                try:
                    check_room(h.id, h.size)
                except errors.DomainError as e:
                    errs[i] = type(e).__name__
                    continue
                todo.append((h.id, data, h.crc, []))
                where.append(i)
            for j, err in (await store.store_many(todo)).items():
                errs[where[j]] = err
            await store.synced()
            return m.Stored(errs=errs)
        for i, (h, data) in enumerate(zip(req.blocks, datas)):
            try:
                check_room(h.id, h.size)
                await store.store(h.id, data, h.crc)
            except errors.DomainError as e:
                errs[i] = type(e).__name__
        return m.Stored(errs=errs)

    def read(r: m.BlockRead, check: bool) -> tuple[list, list[int] | None]:
        return (store.read(r.id, r.offset, r.length), None) if check else store.read_unread(r.id, r.offset, r.length)

    async def get(req: m.Get, _):
        bufs, crcs = read(m.BlockRead(req.block_id, req.offset, req.length), req.check)
        return m.Pieces(lens=[sum(len(b) for b in bufs)], chunk=store.chunk_size if crcs else 0,
                        unchecked={0: crcs} if crcs else {}), bufs

    async def get_many(req: m.GetMany | m.ReadTokened, _):
        """Several (block_id, offset, length) reads in one round trip, for the gateway's batch read: the reply
        payload is the pieces back to back, `lens` their sizes; a piece that failed has length -1 and its error
        in `errs`, so the caller retries just that one on another replica. Whole chunks of large blocks go out
        unread (sendfile), their CRCs in `unchecked` for the reader, unless the request asks to `check`."""
        lens, errs, out, unchecked = [], {}, [], {}
        try:
            for i, r in enumerate(req.reads):
                try:
                    bufs, crcs = read(r, req.check)
                except errors.DomainError as e:
                    lens.append(-1)
                    errs[i] = m.PieceError(type(e).__name__, e.message)
                    continue
                if crcs:
                    unchecked[i] = crcs
                lens.append(sum(len(b) for b in bufs))
                out += bufs
        except BaseException:
            for b in out:
                if isinstance(b, FileSpan):
                    b.close()
            raise
        return m.Pieces(lens=lens, errs=errs, chunk=store.chunk_size if unchecked else 0, unchecked=unchecked), out

    async def read_tokened(req: m.ReadTokened, _):
        """get_many for a native client (a loader reading straight from the DataNodes): req.grant is the gateway's
        read token (common/readtoken.py), which must cover every block read. The client reads a piece this node
        fails from another replica, but can't tell the NameNode: blocks whose copy here is bad are noted for the
        heartbeat to report."""
        readtoken.check(secret, req.grant, {r.id for r in req.reads})
        head, out = await get_many(req, _)
        for i, e in head.errs.items():
            bid = req.reads[i].id
            if e.err == "CorruptBlock" or (e.err == "NoSuchBlock" and store.has(bid)):
                store.bad.add(bid)
        return head, out

    async def write_tokened(req: m.WriteTokened, payload) -> m.Receipts:
        """Blocks of a native client's direct write (common/writetoken.py), stored as their primary and replicated to
        the other nodes the token places them on, exactly as put (one block) or put_many (several) does; answered
        once the write policy's copies are on disk, with a receipt per block (size, CRC32C, digest, nodes) for the
        gateway's commit. A token allows one write of a block: one stored here already with other bytes, or deleted
        since (abandoned, collected), is refused (Conflict); the same bytes again (a retry whose reply was lost)
        get their receipt."""
        me = node_id()
        placed = writetoken.check_heads(secret, req.grant, req.blocks, me, len(payload))
        g = req.grant
        errs: dict[int, str] = {}
        todo = []
        again = []  # blocks stored here already with these very bytes (a retry whose reply was lost): receipted
        for i, (h, data) in enumerate(zip(req.blocks, blocks_in(req.blocks, payload, "write_tokened"))):
            if store.recently_deleted(h.id):
                errs[i] = "Conflict"
            elif store.has(h.id):
                try:
                    same = b"".join(store.read(h.id)) == data
                except errors.DomainError:
                    same = False
                if same:
                    again.append((i, h, data, [n for n in placed[h.id] if n != me]))
                else:
                    errs[i] = "Conflict"
            else:
                todo.append((i, h, data, [n for n in placed[h.id] if n != me]))

        def digests(blocks: list) -> list[str]:
            return [writetoken.block_digest(d, req.fast) for _, _, d, _ in blocks]
        # MD5s (for the ETag) in a worker thread while the blocks are stored and synced, for large writes
        hashing = asyncio.ensure_future(asyncio.to_thread(digests, todo)) \
            if not req.fast and sum(h.size for _, h, _, _ in todo) >= THREAD_MD5_BYTES else None
        addr = g.addrs
        try:
            if len(todo) == 1:
                i, h, data, sec = todo[0]
                try:
                    await put(m.Put(block_id=h.id, crc=h.crc, acks=g.acks,
                                    secondaries=[m.Secondary(n, addr[str(n)]) for n in sec if str(n) in addr]), data)
                except errors.DomainError as e:
                    errs[i] = type(e).__name__
            elif todo:
                heads = [m.NewBlock(h.id, h.crc, h.size, tuple(n for n in sec if str(n) in addr))
                         for _, h, _, sec in todo]
                res = await put_many(m.PutMany(blocks=heads, addrs={str(n): addr[str(n)] for b in heads
                                                                    for n in b.secondaries}, acks=g.acks),
                                     payload if len(todo) == len(req.blocks) and not any(h.zero for h in req.blocks)
                                     else b"".join(d for _, _, d, _ in todo))
                errs.update({todo[j][0]: e for j, e in res.errs.items()})
        finally:
            sums = await hashing if hashing is not None else digests(todo)
        done: list[m.BlockReceipt | None] = [None] * len(req.blocks)
        for (i, h, _, sec), digest in zip(todo + again, sums + digests(again)):
            if i not in errs:
                done[i] = writetoken.receipt(secret, id=h.id, size=h.size, crc=h.crc, digest=digest,
                                             nodes=(me, *sec), acks=g.acks)
        return m.Receipts(done=done, errs=errs)

    async def delete(req: m.Delete, _) -> m.Done:
        store.delete(req.blocks)
        return DONE

    async def has(req: m.Has, _) -> m.HasBlocks:
        return m.HasBlocks(has=[store.has(b) for b in req.blocks])

    async def blocks(req: m.Blocks, _) -> m.BlockIds:
        return m.BlockIds(blocks=store.block_ids())

    async def replicate_once(req: m.ReplicateOnce, _) -> m.ReplicationPass:
        s = await replicator.run_once(everything=True)
        return m.ReplicationPass(ok=s.ok, failed=s.failed)

    return {m.Put: put, m.PutMany: put_many, m.PutReplica: put_replica, m.PutReplicas: put_replicas, m.Get: get, m.GetMany: get_many,
            m.ReadTokened: read_tokened, m.WriteTokened: write_tokened, m.Delete: delete, m.Has: has,
            m.Blocks: blocks,
            m.ReplicateOnce: replicate_once}


def open_payload_check(secret: str, node_id):
    """The RpcServer's `open_payload`: the check of a tokened write on its frame's head, before its payload is read
    (common/rpc.py): a token of ours, live, naming each block on this node at a size it allows."""
    def open_payload(req, payload_len: int) -> None:
        if not isinstance(req, m.WriteTokened):
            raise errors.Unauthorized("only a tokened write carries a payload without the cluster secret")
        writetoken.check_heads(secret, req.grant, req.blocks, node_id(), payload_len)
    return open_payload
