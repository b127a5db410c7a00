"""Direct writes for native clients (fsspec, `epochfs cp`/`sync`, the mount): the bytes go from the client straight to
the primary DataNode of each block, which replicates them as it does a gateway's; the gateway only authorizes,
allocates and commits. Works under asyncio and trio (anyio), through an S3Client (its signed gateway calls and its
DataNode connections without the cluster secret).

    w = DirectWriter(s3client)
    etags = await w.put_objects("bucket", [("a", b"..."), ("b", b"...")])   # one allocate, one write_tokened per
                                                                           # primary node, one commit
    up = w.upload("bucket", "big.bin")          # a stream: blocks stored as they fill, `window` blocks at once
    await up.write(chunk); ...; etag = await up.finish()      # the object appears here, whole (or raise)
    await up.abort()                                           # nothing appears; the blocks are given back

The protocol (gateway/s3/direct.py, common/writetoken.py, datanode/api.py write_tokened):
  1. POST /_epochfs/allocate/<bucket> (a WriteAsk: the keys, checked as PutObjects; sizes; `more` blocks) -> a
     WriteGrant: the blocks with their nodes (primary first) and the nodes' RPC addresses, the largest block size, the
     copies to wait for, the expiry (TTL_S), signed with a key derived from the cluster secret.
  2. DataNodeClient.write_tokened(grant, [ReplicaHead(id, crc32c, size)], bytes) to a node the grant places the
     blocks on (their primary; if it can't be reached the next node of the block): a BlockReceipt per block (size, CRC,
     digest: MD5, or XXH3-128 for blocks of an object of several; nodes, acks; signed by the DataNode).
  3. POST /_epochfs/commit/<bucket> (a DirectCommit: the grants and per object its receipts in order, content type,
     metadata, x-amz-checksum-crc32c, If-None-Match/If-Match) -> PutResults, one per object (ETag or error).
  4. POST /_epochfs/abandon/<bucket> (a DirectCommit with no items: the grants) gives back the blocks of those grants
     that were never committed; blocks nobody gives back are collected by the NameNode's pending expiry.

For the mount (trio) or any other writer with its own commit: `allocate`, then `store(grant, [(index in
grant.blocks, bytes), ...])` gives the receipts; a gateway endpoint that commits them checks them with
gateway/s3/direct.py `granted(ctx, req, grants)` and `written(ctx, receipts, allowed, full_blocks=...)` and must commit
with the NameNode's fresh=True (only pending blocks), as `commit` there does.

Every failure that means "this client can't write directly" (no node of a block can be reached, a node refuses the
token, a bucket that encrypts by default, a gateway without the extension) raises DirectUnavailable, before anything
became visible: the caller writes through the gateway instead (S3Client does, and stays on the gateway for
DIRECT_RETRY_S after the DataNodes could not be reached). Other errors (AccessDenied, NoSuchBucket, QuotaExceeded,
PreconditionFailed) are what a PUT through the gateway would raise.
"""
from __future__ import annotations

import asyncio
import base64
import collections
import time
from collections.abc import AsyncIterable, Iterable

import anyio
import msgspec
import sniffio
from awscrt import checksums as crt

from . import errors
from . import messages as m
from .blocks import crc32c
from .failover import write_deadline
from .worker import in_thread

ROUND_MAX = 64       # blocks a stream asks for at most at a time (it asks 1, 2, 4, ... as it grows)
WINDOW = 4           # blocks of a stream stored per round (one call per primary node)
ROUNDS_IN_FLIGHT = 2  # a stream's rounds stored at once: the next round is filled and sent while one is stored
MAX_CALL_BYTES = 32 << 20  # one write_tokened carries at most this much (the DataNode's RPC payload is 64 MiB)
MAX_CALL_BLOCKS = 1000
THREAD_CRC_BYTES = 512 << 10
DIRECT_RETRY_S = 30.0  # after a DataNode could not be reached, blocks go to their next node for this long

_decode_grant = msgspec.json.Decoder(m.WriteGrant).decode
_decode_results = msgspec.json.Decoder(m.PutResults).decode


class DirectUnavailable(errors.Unavailable):
    """This client can't write directly now (unreachable DataNodes, a refused token, a bucket only the gateway
    writes, an older gateway): write through the gateway. Nothing became visible. `lasting`: the cause is likely to
    last (unreachable nodes), so the caller stays on the gateway's path a while; not for a batch the allocation
    refused for one of its keys (the gateway's batch PUT answers that key's error and stores the others)."""

    def __init__(self, message: str = "", *, lasting: bool = True, **details) -> None:
        super().__init__(message, **details)
        self.lasting = lasting


def of_several(rounds_before: int, blocks: int, more_may_come: bool) -> bool:
    """Are the blocks a writer sends now those of an object of several blocks: a later round of its write, a round
    of several, or a block while more may follow? Their receipts then carry XXH3-128 digests, not MD5s, as the
    object's ETag is the multipart form over its blocks' digests (common/writetoken.py object_etag); an object of
    one block keeps the MD5 of its bytes as its ETag."""
    return rounds_before > 0 or blocks > 1 or more_may_come


def _b64(crc: int) -> str:
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def _whole_crc(heads: list[m.ReplicaHead]) -> int:
    crc = 0
    for j, h in enumerate(heads):
        crc = crt.combine_crc32c(crc, h.crc, h.size) if j else h.crc
    return crc


async def _crcs(pieces: list) -> list[int]:
    if sum(len(p) for p in pieces) >= THREAD_CRC_BYTES:
        def work() -> list[int]:
            return [crc32c(p) for p in pieces]
        return await in_thread(work)
    return [crc32c(p) for p in pieces]


class DirectWriter:
    def __init__(self, client) -> None:
        self.c = client  # common/client.S3Client

    # ---------------------------------------------------------------- the gateway's side
    async def _post(self, what: str, bucket: str, body: bytes):
        try:
            return await self.c._fs_send("POST", f"{what}/{bucket}", content=body)
        except errors.DomainError as e:
            code = e.details.get("code")
            if code == "EncryptedObject":  # this bucket's objects: the others may still be written directly
                raise DirectUnavailable(str(e), lasting=False) from None
            if code == "InvalidRequest" and "Unknown epochfs extension" in str(e):  # a gateway from before
                raise DirectUnavailable(str(e)) from None
            raise

    async def allocate(self, bucket: str, keys: list[str], sizes: list[int] = (), more: int = 0) -> m.WriteGrant:
        """A write token for blocks enough for objects of `sizes` bytes plus `more` (checked as PutObjects of
        `keys`)."""
        r = await self._post("allocate", bucket, msgspec.json.encode(m.WriteAsk(keys=list(keys), sizes=list(sizes),
                                                                                more=more)))
        try:
            return _decode_grant(r.content)
        except msgspec.DecodeError as e:
            raise errors.DomainError(f"malformed allocate reply from the gateway: {e}") from None

    async def commit(self, bucket: str, grants: list[m.WriteGrant], items: list[m.DirectItem]) -> list[m.PutResult]:
        r = await self._post("commit", bucket, msgspec.json.encode(m.DirectCommit(grants=grants, items=items)))
        try:
            return _decode_results(r.content).items
        except msgspec.DecodeError as e:
            raise errors.DomainError(f"malformed commit reply from the gateway: {e}") from None

    async def abandon(self, bucket: str, grants: list[m.WriteGrant]) -> None:
        """Give back the blocks of `grants` never committed (best effort: the NameNode's pending expiry collects
        them anyway)."""
        if not any(g.blocks for g in grants):
            return
        try:
            await self._post("abandon", bucket, msgspec.json.encode(m.DirectCommit(grants=grants, items=[])))
        except errors.DomainError:
            pass

    # ---------------------------------------------------------------- the DataNodes' side
    async def store(self, grant: m.WriteGrant, blocks: list[tuple[int, object]], fast: bool = False
                    ) -> list[m.BlockReceipt]:
        """Store blocks of `grant` ((index in grant.blocks, bytes) each; at most grant.size bytes each) on their
        nodes: one write_tokened per primary for all its blocks (in calls of at most MAX_CALL_BYTES), the nodes in
        parallel; a node that can't be reached (or is full) has its blocks sent to their next node. The receipts in
        the order of `blocks` (`fast`: the blocks are of an object of several, their digests XXH3-128s)."""
        crcs = await _crcs([d for _, d in blocks])
        heads = [m.ReplicaHead(grant.blocks[i].id, c, len(d)) for (i, d), c in zip(blocks, crcs)]
        out: list[m.BlockReceipt | None] = [None] * len(blocks)
        tried: list[set[int]] = [set() for _ in blocks]
        down = self.c._dn_down
        todo = list(range(len(blocks)))
        while todo:
            now = time.monotonic()
            by_node: dict[int, list[int]] = {}
            for k in todo:
                nodes = grant.blocks[blocks[k][0]].nodes
                left = [n for n in nodes if n not in tried[k]]
                if not left:
                    raise DirectUnavailable(f"no node of block {heads[k].id} took it directly")
                up = [n for n in left if down.get(grant.addrs.get(str(n), ""), 0) <= now]
                n = (up or left)[0]
                tried[k].add(n)
                by_node.setdefault(n, []).append(k)
            todo = []
            fatal: list[Exception] = []

            async def node(n: int, ks: list[int]) -> None:
                addr = grant.addrs.get(str(n))
                if addr is None:
                    todo.extend(ks)
                    return
                dn = self.c._datanode(addr)
                start = 0
                while start < len(ks):  # calls of at most MAX_CALL_BYTES / MAX_CALL_BLOCKS
                    end, size = start, 0
                    while end < len(ks) and end - start < MAX_CALL_BLOCKS and \
                            (end == start or size + heads[ks[end]].size <= MAX_CALL_BYTES):
                        size += heads[ks[end]].size
                        end += 1
                    part = ks[start:end]
                    start = end
                    # a node that does not answer in time while every block has another node to go to
                    # (common/failover.py: a stopped DataNode the NameNode still counts alive)
                    others = all(len(tried[k]) < len(grant.blocks[blocks[k][0]].nodes) for k in part)
                    deadline = write_deadline(size) if others and grant.acks == 1 else None
                    try:
                        res = await dn.write_tokened(grant, [heads[k] for k in part], [blocks[k][1] for k in part],
                                                     fast, timeout=deadline)
                    except errors.Unavailable:  # this node's blocks (all of them) go to their next nodes
                        down[addr] = time.monotonic() + DIRECT_RETRY_S
                        todo.extend(ks[start - len(part):])
                        return
                    except errors.PermissionDenied as e:
                        fatal.append(e)
                        return
                    except errors.Unauthorized as e:  # the token refused (expired, a node not registered yet)
                        fatal.append(DirectUnavailable(f"{addr} refused the write token: {e}"))
                        return
                    except Exception as e:  # kept, to be raised as itself (not in an ExceptionGroup)
                        fatal.append(e)
                        return
                    for x, (k, r) in enumerate(zip(part, res.done)):
                        err = None if r is not None else res.errs.get(x, "DomainError")
                        if err is None:
                            out[k] = r
                        elif err in ("NodeFull", "Unavailable"):
                            todo.append(k)
                        else:
                            fatal.append(errors.by_name(err)(f"block {heads[k].id} on {addr}: {err}"))

            async with anyio.create_task_group() as tg:
                for n, ks in by_node.items():
                    tg.start_soon(node, n, ks)
            if fatal:
                raise fatal[0]
        return out

    async def store_slots(self, slots: list[tuple[m.WriteGrant, int]], blocks: list, fast: bool = False
                          ) -> list[m.BlockReceipt]:
        """Store `blocks`, each in its slot (grant, index in grant.blocks), the grants' in parallel (one `store`
        each; a stream's round nearly always has one grant); the receipts in the order of `blocks`. `fast`: a round
        of a stream that has several blocks (a later round, or one of more than one block): XXH3-128 digests."""
        by_grant: dict[int, list[int]] = {}
        for j, (g, _) in enumerate(slots):
            by_grant.setdefault(id(g), []).append(j)
        got: list = [None] * len(blocks)
        failed: list[Exception] = []

        async def one(js: list[int]) -> None:
            g = slots[js[0]][0]
            try:
                for j, r in zip(js, await self.store(g, [(slots[j][1], blocks[j]) for j in js], fast)):
                    got[j] = r
            except Exception as e:  # raised as itself below, not in a task group's ExceptionGroup
                failed.append(e)
        if len(by_grant) == 1:
            await one(next(iter(by_grant.values())))
        else:
            async with anyio.create_task_group() as tg:
                for js in by_grant.values():
                    tg.start_soon(one, js)
        if failed:
            raise failed[0]
        return got

    # ---------------------------------------------------------------- whole objects
    async def put_objects(self, bucket: str, items: list[tuple[str, object]], *, if_none_match: str | None = None,
                          content_types: list[str | None] | None = None) -> list[str | errors.DomainError]:
        """Store objects (key, bytes) with one allocation, one write_tokened per primary node and one commit: each
        result is the object's ETag (unquoted) or its own error (a quota, a condition); each object appears whole or
        not at all. DirectUnavailable (nothing visible): write them through the gateway."""
        try:
            grant = await self.allocate(bucket, [k for k, _ in items], [len(d) for _, d in items])
        except (errors.Unauthorized, errors.InvalidInput) as e:
            if len(items) == 1:
                raise
            raise DirectUnavailable(f"a key of the batch was refused ({e})", lasting=False) from None
        try:
            bs, flat, counts = grant.size, [], []
            for _, data in items:
                mv = memoryview(data).cast("B")
                pieces = [mv[o:o + bs] for o in range(0, len(mv), bs)]
                counts.append(len(pieces))
                flat += [(len(flat) + j, p) for j, p in enumerate(pieces)]
            nxt = len(flat)
            if nxt > len(grant.blocks):
                raise DirectUnavailable("the bucket's block size changed during the write")
            receipts = iter(await self.store(grant, flat))
            commit = []
            for j, ((k, _), n) in enumerate(zip(items, counts)):
                rs = [next(receipts) for _ in range(n)]
                commit.append(m.DirectItem(key=k, blocks=rs, ctype=content_types[j] if content_types else None,
                                           checksum={"crc32c": _b64(_whole_crc(rs) if rs else 0)},
                                           if_none_match=if_none_match))
            res = await self.commit(bucket, [grant], commit)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.abandon(bucket, [grant])
            raise
        if any(r.err for r in res) or nxt < len(grant.blocks):
            await self.abandon(bucket, [grant])  # an object refused gives its blocks back (commit did); spare ones
        from .client import _item_error
        return [_item_error(r, bucket, k) if r.err else r.etag.strip('"') for (k, _), r in zip(items, res)]

    def upload(self, bucket: str, key: str, *, if_none_match: str | None = None,
               content_type: str | None = None, window: int = WINDOW) -> "DirectUpload":
        return DirectUpload(self, bucket, key, if_none_match=if_none_match, content_type=content_type, window=window)

    async def put_stream(self, bucket: str, key: str, chunks: Iterable | AsyncIterable, *,
                         if_none_match: str | None = None) -> str:
        """Store an object from its chunks (bytes, any sizes; a sync or async iterable), blocks stored as they fill;
        its ETag. Nothing is visible unless it all was stored."""
        up = self.upload(bucket, key, if_none_match=if_none_match)
        try:
            if hasattr(chunks, "__aiter__"):
                async for c in chunks:
                    await up.write(c)
            else:
                for c in chunks:
                    await up.write(c)
            return await up.finish()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await up.abort()
            raise


class DirectUpload:
    """One object written directly as a stream (fsspec's open('wb'), a large file of `epochfs cp`): `write` buffers
    and stores full blocks, `window` at a time (one call per primary node); `finish` stores the rest and commits (the
    object appears then, whole); `abort` gives everything back. Under asyncio ROUNDS_IN_FLIGHT such rounds are stored
    at once: `write` returns while the last round is being stored, so the caller fills the next one meanwhile (a
    round's failure is raised by a later `write`, `drain` or `finish`). Memory: at most `window` x ROUNDS_IN_FLIGHT
    blocks plus what one write brings."""

    def __init__(self, w: DirectWriter, bucket: str, key: str, *, if_none_match: str | None,
                 content_type: str | None, window: int) -> None:
        self.w, self.bucket, self.key = w, bucket, key
        self.if_none_match, self.content_type, self.window = if_none_match, content_type, max(1, window)
        self.grants: list[m.WriteGrant] = []
        self._free: list[tuple[m.WriteGrant, int]] = []  # allocated blocks not used yet: (grant, index)
        self._round = 1
        self._buf: list = []
        self._have = 0
        self._full: list = []  # full blocks waiting to be stored
        self._rounds: list[list[m.BlockReceipt | None]] = []  # each round's receipts, in the object's order
        self._storing: collections.deque[asyncio.Future] = collections.deque()  # rounds being stored (asyncio)
        self.size = 0
        self.block_size: int | None = None

    @property
    def stored(self) -> bool:
        """Is a block of this stream stored already (its first round answered)?"""
        return bool(self._rounds) and None not in self._rounds[0]

    @property
    def receipts(self) -> list[m.BlockReceipt]:
        """The receipts of the blocks stored so far, in the object's order (up to the first round still storing)."""
        out = []
        for got in self._rounds:
            if None in got:
                break
            out += got
        return out

    async def _more(self, n: int) -> None:
        """Allocate at least `n` more blocks (1, 2, 4, ... ROUND_MAX as the stream grows)."""
        g = await self.w.allocate(self.bucket, [self.key], more=max(self._round, n))
        self.grants.append(g)
        self._round = min(self._round * 2, ROUND_MAX)
        if self.block_size is None:
            self.block_size = g.size
        elif g.size != self.block_size:
            raise DirectUnavailable("the bucket's block size changed during the write")
        self._free += [(g, i) for i in range(len(g.blocks))]

    async def _blocks(self, n: int) -> list[tuple[m.WriteGrant, int]]:
        while len(self._free) < n:
            await self._more(n - len(self._free))
        out, self._free = self._free[:n], self._free[n:]
        return out

    async def write(self, data) -> None:
        """Add bytes; full blocks are stored `window` at a time (a bytes object is kept as it is, anything else is
        copied: the caller may reuse its buffer)."""
        if not len(data):
            return
        if self.block_size is None:
            await self._more(1)
        bs = self.block_size
        keep = isinstance(data, bytes)
        mv = memoryview(data).cast("B")
        self.size += len(mv)
        while self._have + len(mv) >= bs:
            piece, mv = mv[:bs - self._have], mv[bs - self._have:]
            if self._buf:
                self._full.append(b"".join([*self._buf, piece]))
            else:
                self._full.append(piece if keep else bytes(piece))
            self._buf, self._have = [], 0
        if len(mv):
            self._buf.append(mv if keep else bytes(mv))
            self._have += len(mv)
        if len(self._full) >= self.window:
            await self._flush(more_may_come=True)

    async def _flush(self, more_may_come: bool) -> None:
        full, self._full = self._full, []
        if not full:
            return
        slots = await self._blocks(len(full))
        got: list[m.BlockReceipt | None] = [None] * len(full)
        fast = of_several(len(self._rounds), len(full), more_may_come)
        self._rounds.append(got)
        if sniffio.current_async_library() != "asyncio":  # trio: no task outlives the call (structured)
            await self._store(slots, full, got, fast)
            return
        self._storing.append(asyncio.ensure_future(self._store(slots, full, got, fast)))
        while len(self._storing) >= ROUNDS_IN_FLIGHT:
            await self._storing.popleft()

    async def _store(self, slots: list[tuple[m.WriteGrant, int]], full: list, got: list, fast: bool) -> None:
        got[:] = await self.w.store_slots(slots, full, fast)

    async def drain(self) -> None:
        """Wait until every full block written so far is stored (raises what storing one raised)."""
        while self._storing:
            await self._storing.popleft()

    async def finish(self) -> str:
        """Store what is left and commit: the object's ETag (unquoted). On failure nothing is visible."""
        if self._buf:
            self._full.append(b"".join(self._buf))
            self._buf, self._have = [], 0
        await self._flush(more_may_come=False)
        await self.drain()
        receipts = self.receipts
        crc = _whole_crc(receipts) if receipts else 0
        res, = await self.w.commit(self.bucket, [g for g in self.grants if any(
            p.id in {r.id for r in receipts} for p in g.blocks)], [m.DirectItem(
                key=self.key, blocks=receipts, ctype=self.content_type, checksum={"crc32c": _b64(crc)},
                if_none_match=self.if_none_match)])
        if self._free or res.err:
            await self.w.abandon(self.bucket, self.grants)
        if res.err:
            from .client import _item_error
            raise _item_error(res, self.bucket, self.key)
        return res.etag.strip('"')

    async def abort(self) -> None:
        """Give everything back (rounds still being stored are cancelled first)."""
        self._buf, self._full = [], []
        storing, self._storing = self._storing, collections.deque()
        for f in storing:
            f.cancel()
        for f in storing:
            try:
                await f
            except BaseException:  # noqa: BLE001 -- cancelled or failed: given back below either way
                pass
        await self.w.abandon(self.bucket, self.grants)
