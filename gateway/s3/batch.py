"""Batch reads and dataset manifests for training loaders, at /_epochfs/batch and /_epochfs/manifest.

  POST /_epochfs/batch[/<bucket>]   {"items": [{"bucket": b, "key": k, "start": s, "end": e}, ...]}
      bucket defaults to the one in the path; start/end are optional and read like a Python slice (end exclusive,
      negative counts from the end). Answer: a 4-byte big-endian length, a JSON index
      {"items": [{"len": n, "size": object size, "etag": e, "mt": mtime_ns} | {"err": S3 code, "msg": text}]},
      then the items' bytes back to back in request order. One bad key is one item's error, not a failed batch.
  POST /_epochfs/locate[/<bucket>]  the same body; answers where the bytes are instead of the bytes: the index with
      each item's block pieces, the DataNodes' addresses and a short-lived read token (common/readtoken.py), so a
      native client reads the DataNodes directly, the gateway's copy of every byte saved (see batch_locate).
  GET /_epochfs/manifest/<bucket>[/<prefix>]?after=
      every key under the prefix (no delimiter), streamed as lines, each a JSON array of [key, size, etag,
      mtime_ns] entries (one NameNode page per line, keys in S3 order, read from directory entries, no stat).
  `?stale=1` on any of them: a standby NameNode may answer the namespace part (HA observer reads, messages.StaleOk;
      the answer may miss the last NN_STALE_READ_MAX_S of writes).

A batch costs one NameNode RPC for all its keys (stat_many) and one RPC per DataNode for all the blocks it serves
(get_many), instead of a stat and a block read per object. Items are checked exactly as GetObject checks them
(bucket ownership, key permissions, ACLs). Reads go out in windows of WINDOW_BYTES so a huge batch streams in
bounded memory; a piece whose chosen replica fails is read again from the others (with read repair), and if that
fails too the item carries the error (in the first window; past it the index is sent, so the connection is cut).
"""
from __future__ import annotations

import asyncio
import dataclasses
import struct

import msgspec
import orjson
from epochfs.common import errors, readtoken
from epochfs.common import messages as m
from epochfs.common.blocks import pick_replica
from epochfs.common.failover import read_deadline

from ..cluster import open_piece, plan_range
from ..crypto import BlockCipher
from . import sse
from .access import bucket_access, check_object_read
from .body import read_all
from .errors import S3Error, from_domain, invalid_request
from .ext import extension, wants_stale
from .http import Response
from .objects import check_key

MAX_ITEMS = 10_000
MAX_BODY = 8 << 20
WINDOW_BYTES = 32 << 20
MANIFEST_PAGE = 10_000
_LEN = struct.Struct(">I")


@dataclasses.dataclass(slots=True)
class _Item:
    bucket: str
    key: str
    start: int | None
    end: int | None
    meta: m.BatchItem | None = None     # the index entry: its length, size, ETag and mtime, or its error
    pieces: list = dataclasses.field(default_factory=list)  # (blk, offset, length), then the bytes read
    cipher: BlockCipher | None = None   # an object encrypted with an SSE-S3 or SSE-KMS key: decrypted here

    def fail(self, e: Exception) -> None:
        s3e = e if isinstance(e, S3Error) else from_domain(e)
        self.meta = m.BatchItem(err=s3e.code, msg=s3e.message)
        self.pieces = []

    @property
    def length(self) -> int:
        """The bytes the item reads (none when it failed)."""
        return self.meta.length or 0


def _parse(body: bytes, default_bucket: str | None) -> list[_Item]:
    try:
        raw = orjson.loads(body)["items"]
        items = [_Item(it.get("bucket") or default_bucket, it["key"], it.get("start"), it.get("end"))
                 for it in raw]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise S3Error("MalformedJSON", 'The body must be {"items": [{"bucket", "key", "start", "end"}, ...]}.',
                      400) from None
    if len(items) > MAX_ITEMS:
        raise errors.InvalidInput(f"A batch holds at most {MAX_ITEMS} items.")
    for it in items:
        if not isinstance(it.bucket, str) or not isinstance(it.key, str) or not it.key:
            raise errors.InvalidInput("Every item needs a bucket and a non-empty key.")
        if not all(v is None or type(v) is int for v in (it.start, it.end)):
            raise errors.InvalidInput("start and end must be integers.")
    return items


def _slice(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    s = 0 if start is None else max(size + start, 0) if start < 0 else min(start, size)
    e = size if end is None else max(size + end, 0) if end < 0 else min(end, size)
    return s, max(s, e)


async def _stat_items(ctx, req, items: list[_Item]) -> dict:
    """Check each bucket once and stat every key in one NameNode call; failed items get their error."""
    infos: dict[str, dict | Exception] = {}
    for b in {it.bucket for it in items}:
        try:
            infos[b] = await bucket_access(ctx, dataclasses.replace(req, bucket=b, key=None), "object")
        except (S3Error, errors.DomainError) as e:
            infos[b] = e
    todo = []
    for it in items:
        info = infos[it.bucket]
        if isinstance(info, Exception):
            it.fail(info)
            continue
        try:
            check_key(it.key)
        except errors.KeyTooLong as e:
            it.fail(e)
            continue
        todo.append(it)
    if not todo:
        return {}
    res = await ctx.cluster.namenode.stat_many([(it.bucket, it.key) for it in todo], stale=wants_stale(req))
    for it, obj in zip(todo, res.objs):
        info = infos[it.bucket]
        try:
            if obj.error:
                e = errors.by_name(obj.error)(obj.msg)
                if isinstance(e, errors.NoSuchKey):  # AccessDenied for those who may not list
                    check_object_read(ctx, req, info, None, key=it.key, action="s3:GetObject")
                raise e
            check_object_read(ctx, req, info, obj, key=it.key, action="s3:GetObject")
            if obj.sse is not None:
                if obj.sse.alg == "SSE-C":
                    raise invalid_request("The object is encrypted with a customer-provided key (SSE-C): read it "
                                          "with GetObject and its key")
                it.cipher = BlockCipher(sse.data_key(ctx, {}, obj.sse))
        except (S3Error, errors.DomainError) as e:
            it.fail(e)
            continue
        s, e = _slice(obj.size, it.start, it.end)
        it.meta = m.BatchItem(length=e - s, size=obj.size, etag=obj.etag.strip('"'), mt=obj.mt)
        it.pieces = plan_range(obj.blk, s, e)
    return res.addrs


def _windows(items: list[_Item]) -> list[list[_Item]]:
    out, cur, n = [], [], 0
    for it in items:
        cur.append(it)
        n += it.length
        if n >= WINDOW_BYTES:
            out.append(cur)
            cur, n = [], 0
    if cur:
        out.append(cur)
    return out


async def _fetch(ctx, items: list[_Item], addrs: dict, first: bool) -> None:
    """Replace every piece of the window's items by its bytes: one get_many per DataNode, then the pieces that
    failed one by one through the cluster's replica fallback."""
    by_node: dict[str, list[tuple[_Item, int]]] = {}
    peers = ctx.cluster.peers
    avoid = peers.avoided()
    for it in items:
        for j, (blk, off, n) in enumerate(it.pieces):
            addr = pick_replica(blk.id, blk.nodes, addrs, avoid) or pick_replica(blk.id, blk.nodes, addrs)
            by_node.setdefault(addr or "", []).append((it, j))

    async def node_reads(addr: str, refs: list[tuple[_Item, int]]) -> None:
        if not addr:
            return
        reads = [m.BlockRead(blk.id, off, n) for blk, off, n in (it.pieces[j] for it, j in refs)]
        try:  # (a node that does not answer in time: the fallback reads from the other holders)
            head, payload = await peers.get(addr).get_many(reads, timeout=read_deadline(sum(r.length for r in reads)))
        except errors.DomainError as e:
            if isinstance(e, errors.Unavailable):
                peers.slow(addr)
            return  # every piece of this node goes through the fallback
        view, pos = memoryview(payload), 0
        for (it, j), n in zip(refs, head.lens):
            if n >= 0:
                data = view[pos:pos + n]
                if it.cipher is not None:
                    blk, off, _ = it.pieces[j]
                    data = await open_piece(it.cipher, blk.id, off, data)
                it.pieces[j] = data
                pos += n

    await asyncio.gather(*(node_reads(a, refs) for a, refs in by_node.items()))
    todo = [(it, j) for it in items for j, p in enumerate(it.pieces) if isinstance(p, tuple)]
    got = await asyncio.gather(*(_read_piece(ctx, it.pieces[j], addrs, it.cipher) for it, j in todo),
                               return_exceptions=True)
    for (it, j), r in zip(todo, got):
        if isinstance(r, BaseException):
            if not first or not isinstance(r, errors.DomainError):
                raise r
            it.fail(r)
        elif it.pieces:  # empty once another piece of the item failed
            it.pieces[j] = r


def _read_piece(ctx, piece: tuple, addrs: dict, cipher: BlockCipher | None = None):
    blk, off, n = piece
    return ctx.cluster.read_block(blk, addrs, off, n, cipher)


@extension("POST", "batch")
async def batch_read(ctx, req):
    items = _parse(await read_all(req.receive, MAX_BODY), req.bucket)
    addrs = await _stat_items(ctx, req, items)
    windows = _windows([it for it in items if it.meta.err is None])
    if windows:
        await _fetch(ctx, windows[0], addrs, first=True)
    index = msgspec.json.encode(m.BatchIndex(items=[it.meta for it in items]))
    total = _LEN.size + len(index) + sum(it.length for it in items)

    async def body():
        yield _LEN.pack(len(index)) + index
        nxt = None
        for w, window in enumerate(windows):
            if nxt is not None:
                await nxt
            if w + 1 < len(windows):  # read the next window while this one goes out
                nxt = asyncio.ensure_future(_fetch(ctx, windows[w + 1], addrs, first=False))
            try:
                for it in window:
                    for p in it.pieces:
                        yield p
            except BaseException:
                if nxt is not None:
                    nxt.cancel()
                raise
            for it in window:
                it.pieces = []  # sent: let the buffers go

    return Response(200, [("content-type", "application/x-epochfs-batch")], body(), length=total)


@extension("POST", "locate")
async def batch_locate(ctx, req):
    """The batch read's plan instead of its bytes, for a native client that reads from the DataNodes itself: the
    body of /batch, checked the same way; the answer is a BatchLocated (common/messages.py): the index entries with
    their pieces, the holders' RPC addresses and a read token for every block listed."""
    items = _parse(await read_all(req.receive, MAX_BODY), req.bucket)
    addrs = await _stat_items(ctx, req, items)
    for it in items:
        if it.meta.err is None and it.cipher is not None:  # only a gateway decrypts: the client asks /batch for it
            it.meta = m.BatchItem(err="EncryptedObject", msg="The object is encrypted server-side: read it through "
                                  "the gateway")
            it.pieces = []
        elif it.meta.err is None:
            it.meta = msgspec.structs.replace(it.meta, pieces=[
                m.LocatedPiece(id=blk.id, offset=off, length=n, nodes=blk.nodes) for blk, off, n in it.pieces])
    grant = readtoken.issue(ctx.settings.cluster_secret,
                            (p.id for it in items if it.meta.pieces for p in it.meta.pieces))
    body = msgspec.json.encode(m.BatchLocated(items=[it.meta for it in items], addrs=addrs, grant=grant))
    return Response(200, [("content-type", "application/json")], body)


@extension("GET", "manifest")
async def manifest(ctx, req):
    if req.bucket is None:
        raise errors.InvalidInput("GET /_epochfs/manifest/<bucket>[/<prefix>]: the bucket is missing")
    # the same right as ListObjects with this prefix
    await bucket_access(ctx, dataclasses.replace(req, key=None, query={**req.query, "prefix": req.key or ""}),
                        "read", action="s3:ListBucket")
    prefix, after = req.key or "", req.query.get("after", "")
    stale = wants_stale(req)
    first = await ctx.cluster.namenode.manifest(req.bucket, prefix, after, MANIFEST_PAGE, stale=stale)

    async def lines():
        page = first
        while True:
            yield orjson.dumps([[it.key, it.size, it.etag.strip('"'), it.mtime_ns] for it in page.items]) + b"\n"
            if not page.truncated or not page.items:
                return
            page = await ctx.cluster.namenode.manifest(req.bucket, prefix, page.items[-1].key, MANIFEST_PAGE,
                                                       stale=stale)

    return Response(200, [("content-type", "application/x-ndjson")], lines(), length=None)
