"""The gateway's view of the cluster: NameNode calls (retried while it restarts) and block I/O with DataNodes."""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence

import msgspec

from epochfs.common import defaults, errors
from epochfs.common import messages as m
from epochfs.common.blocks import crc32c
from epochfs.common.clients import NameNodeClient
from epochfs.common.failover import read_deadline, write_deadline
from epochfs.common.peers import Peers

log = logging.getLogger("epochfs.gateway")

# Hash blocks at least this large in a worker thread: hashlib and crc32c release the GIL, so the event loop keeps
# serving while a 4 MiB block is hashed; below it the thread hand-off costs more than the hashing.
THREAD_HASH_BYTES = 512 << 10
# What a GET of several blocks reads ahead of the block it sends. s3_bench.py's GET stream of 1 GiB in 4 MiB blocks,
# two blocks ahead against four (16 MiB), four runs each alternating: 805-893 against 853-1,115 MB/s. In bytes, so
# that a bucket of 32 MiB blocks doesn't hold 96 MiB per slow reader (one block ahead, at least).
READ_AHEAD_BYTES = 16 << 20
# The first block of every upload comes from a pool of allocations leased from the NameNode in batches: a small PUT
# then costs the NameNode one commit instead of an allocation and a commit. Leases older than LEASE_TTL_S, or than
# a quarter of the NameNode's pending grace (after which it expires them and refuses a commit naming them), are
# given back (placement may have changed); leases never used are collected by the NameNode's pending-block expiry.
LEASE_BATCH = 32
LEASE_TTL_S = 30.0
CLOSE_ABANDON_S = 1.0


class Cluster:
    def __init__(self, namenode: str, secret: str, *, rpc_timeout_s: float = 30.0, nn_retry_s: float = 10.0,
                 local_reads: bool = False) -> None:
        self.namenode = NameNodeClient.connect(namenode, secret, timeout=rpc_timeout_s, retry_s=nn_retry_s)
        self.peers = Peers(secret, timeout=rpc_timeout_s, local_reads=local_reads)
        self.nn_retry_s = nn_retry_s
        self._block_size: dict[str, tuple[int, float]] = {}  # bucket -> (block size, when the NameNode said so)
        self._tasks: set[asyncio.Task] = set()
        self._leases: dict[str, collections.deque] = {}

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()  # read-repair reports still under way
        ids = [lease[0] for pool in self._leases.values() for lease in pool]
        self._leases.clear()
        try:  # a NameNode stopped first would have the call retried as a failover for 10 s: the pending expiry
            await asyncio.wait_for(self.abandon(ids), CLOSE_ABANDON_S)  # collects what is not given back
        except asyncio.TimeoutError:
            pass
        await self.namenode.close()
        await self.peers.close()

    async def block_size(self, bucket: str) -> int:
        """The size new writes to `bucket` are cut into, as the NameNode said it last: in its bucket info or in an
        allocate reply (each carries it). A change made through this gateway applies to the next write
        (forget_bucket); one made through another gateway within LEASE_TTL_S, or at this one's next allocation."""
        hit = self._block_size.get(bucket)
        if hit is None or time.monotonic() - hit[1] > LEASE_TTL_S:
            info = await self.namenode.bucket_info(bucket)
            hit = self._block_size[bucket] = (info.block_size or defaults.BLOCK_SIZE, time.monotonic())
        return hit[0]

    def _told_block_size(self, bucket: str, res: m.Allocation) -> None:
        """Note the bucket's block size an allocate reply carries."""
        if res.block_size:
            self._block_size[bucket] = (res.block_size, time.monotonic())

    async def commit(self, bucket: str, call):
        """Await a commit of new blocks (`call`: the NameNodeClient's put_object or mpu_put_part). NotEnoughReplicas
        means blocks acknowledged by fewer copies than the bucket's write policy wants now (it changed since this
        gateway leased them): the next upload allocates afresh."""
        try:
            return await call
        except errors.NotEnoughReplicas:
            self._drop_leases(bucket)
            raise

    def forget_bucket(self, bucket: str) -> None:
        self._block_size.pop(bucket, None)
        self._drop_leases(bucket)

    def _drop_leases(self, bucket: str | None) -> None:
        pool = self._leases.pop(bucket, None)
        if pool:
            self._background(self.abandon([lease[0] for lease in pool]))

    async def abandon(self, block_ids: list[int]) -> None:
        """Give allocated, never committed blocks back (best effort: the NameNode's pending expiry collects what a
        failed call leaves)."""
        if not block_ids:
            return
        try:
            await self.namenode.abandon(block_ids)
        except errors.DomainError:
            pass

    async def _lease(self, bucket: str) -> tuple[int, tuple[int, ...], dict, int]:
        """An allocated block (id, targets, addresses, replicas to wait for) for the first block of an upload."""
        pool = self._leases.setdefault(bucket, collections.deque())
        now = time.monotonic()
        stale = []
        while pool and now > pool[0][3]:
            stale.append(pool.popleft()[0])
        if stale:
            self._background(self.abandon(stale))
        if not pool:
            res = await self.namenode.allocate(bucket, count=LEASE_BATCH)
            self._told_block_size(bucket, res)
            until = time.monotonic() + min(LEASE_TTL_S, res.grace_s / 4 if res.grace_s > 0 else LEASE_TTL_S)
            pool.extend((p.id, p.nodes, res.addrs, until, res.acks) for p in res.blocks)
        bid, nodes, addrs, _, acks = pool.popleft()
        return bid, nodes, addrs, acks

    # ------------------------------------------------------------------ writes
    async def write_stream(self, bucket: str, stream: AsyncIterator[bytes], update: Callable[[bytes], None],
                           limit: int | None = None, cipher=None) -> tuple[list[m.WrittenBlock], int]:
        """Cut `stream` into blocks, feed each to `update` (the request's hashers) and store it on DataNodes;
        with `cipher` (gateway/crypto.BlockCipher) each block is stored encrypted (hashed before, CRC'd after).

        Returns (the blocks for the NameNode's commit, with the copies acknowledged of each; total size).
        On any failure the blocks written so far are abandoned
        (deleted by the NameNode's GC orders) and the error propagates: nothing becomes visible.
        """
        bs = await self.block_size(bucket)
        seed = int.from_bytes(os.urandom(8), "big") >> 1  # placement stripes this upload's blocks from here
        blocks: list[m.WrittenBlock | None] = []
        allocated: list[int] = []
        inflight: list[asyncio.Task] = []
        last_hashed: asyncio.Event | None = None
        size = 0
        pending: list = []  # pieces of the next block, joined with one copy when it is full
        have = 0

        async def flush(slot: int, data: bytes, after: asyncio.Event | None, hashed: asyncio.Event) -> None:
            """Store one block; hashing runs strictly in stream order (after `after`), the rest overlaps."""
            try:
                alloc = asyncio.ensure_future(
                    self._lease(bucket) if slot == 0 else self._allocate(bucket, seed, slot))
                if after is not None:
                    await after.wait()
                if cipher is not None:  # the request's hashes are of the plaintext, the CRC of what is stored
                    if len(data) >= THREAD_HASH_BYTES:
                        await asyncio.to_thread(update, data)
                    else:
                        update(data)
                elif len(data) >= THREAD_HASH_BYTES:
                    crc = await asyncio.to_thread(_hash_block, data, update)
                else:
                    crc = _hash_block(data, update)
            finally:
                hashed.set()
            bid, nodes, addrs, acks = await alloc
            allocated.append(bid)
            if cipher is not None:
                if len(data) >= THREAD_HASH_BYTES:
                    data, crc = await asyncio.to_thread(_seal_block, cipher, bid, data)
                else:
                    data, crc = _seal_block(cipher, bid, data)
            used = await self._put_block(bid, data, crc, nodes, addrs, acks)
            blocks[slot] = m.WrittenBlock(bid, len(data), crc, tuple(used), acks)  # the commit checks acks

        async def submit(data: bytes) -> None:
            nonlocal inflight, last_hashed
            hashed = asyncio.Event()
            blocks.append(None)
            for t in inflight:
                if t.done():
                    t.result()  # a block that failed fails the upload now, with its error
            inflight = [t for t in inflight if not t.done()]
            inflight.append(asyncio.create_task(flush(len(blocks) - 1, data, last_hashed, hashed)))
            last_hashed = hashed
            if len(inflight) > 2:
                await inflight[0]

        try:
            async for piece in stream:
                size += len(piece)
                if limit is not None and size > limit:
                    raise errors.EntityTooLarge("Your proposed upload exceeds the maximum allowed size")
                while have + len(piece) >= bs:
                    mv = memoryview(piece)
                    pending.append(mv[:bs - have])
                    piece = mv[bs - have:]
                    await submit(_joined(pending))
                    pending, have = [], 0
                if len(piece):
                    pending.append(piece)
                    have += len(piece)
            if pending:
                await submit(_joined(pending))
            for t in inflight:
                await t
        except BaseException:
            for t in inflight:
                t.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)
            await self.abandon(allocated)
            raise
        return blocks, size

    async def write_many(self, bucket: str, objects: list[list[tuple[memoryview, int]]],
                         ciphers: list | None = None) -> list[list[m.WrittenBlock] | errors.DomainError]:
        """Store the blocks of many small objects (per object its blocks as (data, crc)) with one allocation and one
        put_many per primary DataNode; a block its primary can't take (unreachable, full) is written on its own
        through `_put_block`, which tries the other replicas. Per object: its written blocks, or the error that
        stopped one of them (that object's other blocks are abandoned here). `ciphers` (per object, or None): an
        object with a BlockCipher has its blocks stored encrypted, as write_stream's (CRC of what is stored)."""
        flat = [(i, data, crc) for i, blocks in enumerate(objects) for data, crc in blocks]
        out: list = [[] for _ in objects]
        if not flat:
            return out
        res = await self.namenode.allocate(bucket, count=len(flat))
        self._told_block_size(bucket, res)
        placed, addrs, acks = res.blocks, res.addrs, res.acks
        if ciphers is not None and any(c is not None for c in ciphers):
            def seal() -> list:
                return [(i, data, crc) if ciphers[i] is None else (i, *_seal_block(ciphers[i], p.id, data))
                        for (i, data, crc), p in zip(flat, placed)]
            try:
                flat = await asyncio.to_thread(seal)
            except BaseException:
                await self.abandon([p.id for p in placed])
                raise
        written: list[m.WrittenBlock | errors.DomainError | None] = [None] * len(flat)
        by_primary: dict[int, list[int]] = {}
        for j, p in enumerate(placed):
            by_primary.setdefault(p.nodes[0], []).append(j)

        async def alone(j: int) -> None:
            p, (_, data, crc) = placed[j], flat[j]
            nodes = p.nodes[1:] + p.nodes[:1]  # its primary failed it: the others first
            try:
                used = await self._put_block(p.id, data, crc, nodes, addrs, acks)
                written[j] = m.WrittenBlock(p.id, len(data), crc, tuple(used), acks)
            except errors.DomainError as e:
                written[j] = e

        async def node(primary: int, js: list[int]) -> None:
            heads = [m.NewBlock(placed[j].id, flat[j][2], len(flat[j][1]), placed[j].nodes[1:]) for j in js]
            sec = {str(n): addrs[str(n)] for j in js for n in placed[j].nodes[1:]}
            deadline = write_deadline(sum(len(flat[j][1]) for j in js)) if acks == 1 else None
            try:  # (blocks a primary does not take in time go one by one to their other nodes)
                errs = await self.peers.get(addrs[str(primary)]).put_many(heads, [flat[j][1] for j in js], sec, acks,
                                                                          timeout=deadline)
            except errors.NotEnoughReplicas:
                raise
            except errors.Unavailable as e:
                log.warning("put_many on node %s failed (%s): its %d blocks one by one", primary, e, len(js))
                errs = {k: "Unavailable" for k in range(len(js))}
            retry = []
            for k, j in enumerate(js):
                err = errs.get(k)
                if err is None:
                    written[j] = m.WrittenBlock(placed[j].id, len(flat[j][1]), flat[j][2], placed[j].nodes, acks)
                elif err in ("NodeFull", "Unavailable"):
                    retry.append(j)
                else:
                    written[j] = errors.by_name(err)(f"block {placed[j].id}: {err}")
            await asyncio.gather(*(alone(j) for j in retry))

        try:
            await asyncio.gather(*(node(n, js) for n, js in by_primary.items()))
        except BaseException:
            await self.abandon([p.id for p in placed])
            raise
        failed: set[int] = set()
        for (i, _, _), w in zip(flat, written):
            if isinstance(w, errors.DomainError):
                if i not in failed:
                    out[i] = w
                    failed.add(i)
            elif i not in failed:
                out[i].append(w)
        lost = [p.id for (i, _, _), p in zip(flat, placed) if i in failed]
        if lost:
            await self.abandon(lost)
        return out

    async def _allocate(self, bucket: str, seed: int, index: int) -> tuple[int, tuple[int, ...], dict, int]:
        res = await self.namenode.allocate(bucket, count=1, seed=seed, index=index)
        self._told_block_size(bucket, res)
        placed, = res.blocks
        return placed.id, placed.nodes, res.addrs, res.acks

    async def _put_block(self, bid: int, data: bytes, crc: int, nodes, addrs: dict,
                         acks: int = 1) -> list[int]:
        """Write to the first reachable node of `nodes` as primary; it replicates to the others, and acknowledges
        once `acks` replicas (itself included) are durable: the bucket's write policy, async (1) or sync:N.
        NotEnoughReplicas (fewer than `acks` could be written) is final: another primary has the same secondaries."""
        last: Exception | None = None
        placed = list(nodes)
        for k, primary in enumerate(nodes):
            rest = [n for n in placed if n != primary]
            # a primary that does not answer in time while another could take the block (common/failover.py)
            deadline = write_deadline(len(data)) if acks == 1 and k < len(nodes) - 1 else None
            try:
                await self.peers.get(addrs[str(primary)]).put(
                    bid, crc, data, [m.Secondary(n, addrs[str(n)]) for n in rest], acks, timeout=deadline)
                if len(placed) < len(nodes):  # a full node was left out: the NameNode tops the block up later
                    self._background(self._report_short(bid, len(nodes)))
                return [primary] + rest
            except errors.NotEnoughReplicas:
                raise
            except errors.NodeFull as e:
                last = e
                placed.remove(primary)
                log.warning("block %s: node %s is full, leaving it out", bid, primary)
            except errors.Unavailable as e:
                last = e
                log.warning("block %s: primary %s unreachable, trying the next replica", bid, primary)
        raise errors.Unavailable(f"no DataNode accepted block {bid}: {last}")

    # ------------------------------------------------------------------ reads
    async def read_block(self, blk: m.BlockRef, addrs: dict, offset: int = 0, length: int = -1,
                         cipher=None) -> bytes:
        """Read (part of) a block from the first replica that answers with data passing its CRC (decrypted with
        `cipher` if the block is encrypted).

        Replicas that answered with a bad CRC or without the block are reported to the NameNode once another one
        served the read (read repair: the good holder re-pushes the block to them); unreachable ones are left to
        the NameNode's failure detection, and one failing otherwise (an internal error) is skipped too. A holder
        that does not answer within `read_deadline` while another could is given up and read from last for a
        while (common/failover.py: a stopped DataNode)."""
        last: Exception | None = None
        bad: list[int] = []
        holders = [(node, addrs[str(node)]) for node in blk.nodes if str(node) in addrs]
        if avoid := self.peers.avoided():
            holders.sort(key=lambda h: h[1] in avoid)
        deadline = read_deadline(length if length >= 0 else blk.size - offset)
        for k, (node, addr) in enumerate(holders):
            try:
                data = await self.peers.get(addr).get(blk.id, offset, length,
                                                      timeout=deadline if k < len(holders) - 1 else None)
            except errors.DomainError as e:
                last = e
                log.warning("block %s on node %s: %s; trying another replica", blk.id, node, e)
                if isinstance(e, (errors.CorruptBlock, errors.NoSuchBlock)):
                    bad.append(node)
                elif isinstance(e, errors.Unavailable):
                    self.peers.slow(addr)
                continue
            for b in bad:
                self._background(self._report_bad(blk.id, b, node))
            return data if cipher is None else await open_piece(cipher, blk.id, offset, data)
        raise errors.Unavailable(f"no replica of block {blk.id} could be read: {last}")

    async def _report_short(self, block_id: int, wanted: int) -> None:
        try:
            await self.namenode.report_short([(block_id, wanted)])
        except errors.DomainError as e:
            log.warning("could not report block %s as under-replicated: %s", block_id, e)

    async def _report_bad(self, block_id: int, node: int, good: int) -> None:
        try:
            await self.namenode.report_bad_replica(block_id, node, good)
        except errors.DomainError as e:
            log.warning("could not report bad replica of block %s on node %s: %s", block_id, node, e)

    def _background(self, coro) -> None:
        """Run `coro` without making the request wait for it (a reference is kept until it finishes)."""
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def read_range(self, blocks: Sequence[m.BlockRef], addrs: dict, start: int, end: int,
                         cipher=None) -> AsyncIterator[bytes]:
        """Yield bytes [start, end) of a file, fetching READ_AHEAD_BYTES of blocks ahead of the one being sent, one
        block at least (decrypted with `cipher`: only the pieces of the blocks in the range are read and
        decrypted)."""
        plan = plan_range(blocks, start, end)
        if len(plan) == 1:
            blk, off, n = plan[0]
            yield await self.read_block(blk, addrs, off, n, cipher)
            return
        prefetch = max(1, READ_AHEAD_BYTES // max((n for _, _, n in plan), default=1))
        tasks: list[asyncio.Task] = []
        try:
            it = iter(plan)
            for blk, off, n in it:
                tasks.append(asyncio.create_task(self.read_block(blk, addrs, off, n, cipher)))
                if len(tasks) > prefetch:
                    yield await tasks.pop(0)
            while tasks:
                yield await tasks.pop(0)
        finally:
            for t in tasks:
                t.cancel()

    async def read_joined(self, blocks: Sequence[m.BlockRef], addrs: dict, start: int, end: int, cipher=None):
        """Bytes [start, end) of a file in one buffer, for an answer sent in one piece. A range over several blocks
        comes from one DataNode holding them all, in one get_many whose reply is already the pieces back to back:
        no second round trip and no 1 MiB join: ~0.15 ms less gateway CPU for a 1 MiB range across a block boundary
        (a quarter of random 1 MiB ranges in 4 MiB blocks). Without such a node, or if it fails, block by block
        through read_range (replica fallback, read repair)."""
        plan = plan_range(blocks, start, end)
        if len(plan) > 1:
            # the first holder of the first block that holds them all: its primary as a rule, as read_block reads
            first, _, _ = plan[0]
            avoid = self.peers.avoided()
            node = next((n for n in first.nodes if str(n) in addrs and addrs[str(n)] not in avoid
                         and all(n in b.nodes for b, _, _ in plan[1:])), None)
            if node is not None:
                addr = addrs[str(node)]
                try:  # (read_range reads from the other holders if this one does not answer in time)
                    head, data = await self.peers.get(addr).get_many(
                        [m.BlockRead(blk.id, off, n) for blk, off, n in plan], timeout=read_deadline(end - start))
                    if min(head.lens) >= 0:
                        if cipher is None:
                            return data
                        out, pos = [], 0
                        for (blk, off, n) in plan:
                            out.append(await open_piece(cipher, blk.id, off, memoryview(data)[pos:pos + n]))
                            pos += n
                        return b"".join(out)
                    # a copy there is bad or gone: read_range asks that node first, finds it so and has it repaired
                    blocks = [msgspec.structs.replace(b, nodes=tuple(sorted(b.nodes, key=lambda x: x != node)))
                              for b in as_block_refs(blocks)]
                except errors.Unavailable:
                    self.peers.slow(addr)
        pieces = [p async for p in self.read_range(blocks, addrs, start, end, cipher=cipher)]
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def as_block_refs(blocks: Sequence) -> list[m.BlockRef]:
    """Block entries as BlockRefs: those of the NameNode's replies that are still [id, size, crc, nodes, ...] lists
    are converted (a BlockRef passes as it is)."""
    return msgspec.convert(blocks, list[m.BlockRef])


def plan_range(blocks: Sequence[m.BlockRef], start: int, end: int) -> list[tuple[m.BlockRef, int, int]]:
    """The (block, offset in it, length) pieces that hold bytes [start, end) of a file made of `blocks`."""
    out, pos = [], 0
    for blk in as_block_refs(blocks):
        bstart, bend = pos, pos + blk.size
        pos = bend
        if bend > start and bstart < end:
            off = max(start - bstart, 0)
            out.append((blk, off, min(end, bend) - bstart - off))
    return out


def _joined(pieces: list) -> bytes:
    """One block from the pieces of a request body: a single whole piece as it is (or a view of immutable bytes,
    such as a file write's zeros: common/blocks.zeros), else joined with one copy."""
    if len(pieces) == 1 and (not isinstance(pieces[0], memoryview) or isinstance(pieces[0].obj, bytes)):
        return pieces[0]
    return b"".join(pieces)


def _seal_block(cipher, block_id: int, data) -> tuple[bytes, int]:
    """A block encrypted for storing, and the CRC32C of what is stored (the DataNodes check it without a key)."""
    sealed = cipher.apply(block_id, 0, data)
    return sealed, crc32c(sealed)


async def open_piece(cipher, block_id: int, offset: int, data):
    """A piece read from an encrypted block, decrypted (in a worker thread if it is large)."""
    if len(data) >= THREAD_HASH_BYTES:
        return await asyncio.to_thread(cipher.apply, block_id, offset, data)
    return cipher.apply(block_id, offset, data)


def _hash_block(data: bytes, update: Callable[[bytes], None]) -> int:
    update(data)
    return crc32c(data)
