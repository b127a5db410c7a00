"""The mount's API: POSIX operations by inode at /_epochfs/fs[/<bucket>] (see namenode/posix.py).

  POST /_epochfs/fs/<bucket>   a typed request of common/messages.py (FS_OPS: {"op": "fs_lookup", "parent": ...,
                               "name": ...}) -> {"r": its reply} or {"err": class, "msg"}
  GET  /_epochfs/fs/<bucket>?ino=&off=&len=   bytes [off, off+len) of the file (short at its end)
  GET  /_epochfs/fs/<bucket>?ino=&off=&len=&locate=1   where those bytes are instead, a FileLocated: {"etag", "size",
                                     "p": [[block id, offset in it, length, [node, ...]], ...], "addrs": {node: rpc
                                     address}, "grant": read token}, for the mount to read the DataNodes itself
  PUT  /_epochfs/fs/<bucket>?ino=    the file's new content as a layout (a FileWrite: blocks kept, extents new); new
                                     blocks go to the bucket's DataNodes, then one NameNode commit replaces the old
                                     content -> {"r": attributes and the new layout}
  PUT  /_epochfs/fs/<bucket>?files=1  many new files with their content (the mount's write-back creates): a 4-byte
                                     length, a JSON m.NewFiles index, then the files' bytes back to back; their blocks
                                     go in one DataNode batch per node, then one NameNode command creates them, each
                                     whole or not at all -> {"r": {"items": [{"a": attributes} | {"err", "msg"}]}}
  POST /_epochfs/fs with op "fs_statfs" -> capacity, used and inode counts
  POST /_epochfs/fs (no bucket) getattr and readdir of the root, the tree of the buckets the caller may list
  A read by inode whose request has "stale" set (messages.StaleOk; a dataset-mode mount sends it), and a GET with
  `stale=1`, may be answered by a standby NameNode (HA observer reads): up to NN_STALE_READ_MAX_S old.

Namespace errors (the bucket's and the NameNode operation's) travel as JSON with their domain error's class name, a
POSIX answer rather than an S3 failure: the mount turns the class into its errno with frontends/errmap.py, the one
table for that. The data calls, a NameNode that can't be reached and internal errors answer S3 error XML like any S3
request. Requests are SigV4-signed and name the bucket they touch: reading needs read permission on it, changing
needs write (ownership, the key's own permissions, ACLs: access.py), and the NameNode refuses any
inode outside that bucket. Permissions inside the tree are POSIX's, checked by the kernel from mode/uid/gid (the
mount runs with default_permissions).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from typing import Union

import msgspec
from prometheus_client import Counter

from epochfs.common import errors, readtoken, writetoken
from epochfs.common.blocks import crc32c, zeros
from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient
from epochfs.common.messages import op_name

from ..cluster import plan_range
from ..crypto import BlockCipher
from . import args, direct, sse
from .access import bucket_access, check_object_read, may_list
from .body import body_stream, raw_body, read_all
from .errors import S3Error
from .ext import extension, wants_stale
from .http import Response

FS_REQUESTS = Counter("epochfs_fs_requests_total", "Mount API requests", ["op"])
JSON = [("content-type", "application/json")]
READ_OPS = frozenset((m.FsGetattr, m.FsLookup, m.FsReaddir, m.FsDirs, m.FsReadlink, m.FsLayout, m.FsGetxattr, m.FsListxattr))
_decode_op = msgspec.json.Decoder(Union[m.FS_OPS]).decode  # one of the mount's operations, never another request
_decode_layout = msgspec.json.Decoder(m.FileWrite).decode   # the layout ahead of a file write's new bytes


async def _zero_stream(n: int, piece: int):
    """`n` zero bytes as a file write's stream of new bytes (a ZeroExtent), `piece` (the block size) at a time:
    views of one shared buffer, each a block as it is."""
    while n:
        k = min(n, piece)
        yield zeros(k)
        n -= k


def _unhashed(_: bytes) -> None:
    """A ZeroExtent's zeros are not hashed: the ETag of a layout with one hashes the layout."""


_FORWARD = {  # the NameNodeClient method each goes to
    m.FsLookup: NameNodeClient.fs_lookup, m.FsGetattr: NameNodeClient.fs_getattr,
    m.FsReaddir: NameNodeClient.fs_readdir, m.FsDirs: NameNodeClient.fs_dirs, m.FsReadlink: NameNodeClient.fs_readlink,
    m.FsLayout: NameNodeClient.fs_layout, m.FsMkdir: NameNodeClient.fs_mkdir, m.FsMknod: NameNodeClient.fs_mknod,
    m.FsSymlink: NameNodeClient.fs_symlink, m.FsLink: NameNodeClient.fs_link, m.FsUnlink: NameNodeClient.fs_unlink,
    m.FsRmdir: NameNodeClient.fs_rmdir, m.FsRename: NameNodeClient.fs_rename,
    m.FsSetattr: NameNodeClient.fs_setattr, m.FsGetxattr: NameNodeClient.fs_getxattr,
    m.FsListxattr: NameNodeClient.fs_listxattr, m.FsSetxattr: NameNodeClient.fs_setxattr,
    m.FsRemovexattr: NameNodeClient.fs_removexattr, m.FsReserveInodes: NameNodeClient.fs_reserve_inodes}


def _int_arg(req, name: str, default: int | None = None) -> int:
    v = req.query.get(name)
    if v is None and default is None:
        raise errors.InvalidInput(f"{name} must be an integer", argument=name)
    return args.int_arg(v, name, default, hi=args.MAX_INT, msg=f"{name} must be an integer from 0 to 2^63-1")


def _answer(res) -> Response:
    return Response(200, JSON, msgspec.json.encode(res))


def _posix_answer(e: errors.DomainError) -> bool:
    """A failure of the namespace operation itself, answered as JSON: not an unreachable service, not a bug (the
    bare DomainError an internal error arrives as)."""
    return type(e) is not errors.DomainError and not isinstance(e, errors.Unavailable)


def _error(e: errors.DomainError) -> dict:
    return {"err": type(e).__name__, "msg": e.message}


async def _bucket_ino(ctx, req, perm: str) -> int:
    """The inode of the request's bucket, once the caller's `perm` ("read" or "write") on it is checked. The mount
    names inodes, not keys: its namespace reads are s3:ListBucket, its changes s3:PutObject, checked bucket-wide
    against a bucket policy (access.policy_verdict's any_key)."""
    action = "s3:ListBucket" if perm == "read" else "s3:PutObject"
    return (await bucket_access(ctx, req, perm, action=action, any_key=perm != "read")).ino


async def _visible_buckets(ctx, req, entries: list[m.DirEntry]) -> list[m.DirEntry]:
    """The root's entries the caller may list, as ListBuckets shows them."""
    out = []
    for e in entries:
        try:
            if may_list(ctx, req, await ctx.bucket(e.name)):
                out.append(e)
        except errors.NoSuchBucket:
            pass  # deleted since the listing
    return out


def _writes_content(op) -> bool:
    """Whether `op` starts or is part of writing a file's bytes through the mount: a regular file made, a size
    set (O_TRUNC, truncate), the layout a writer starts from, inode numbers for write-back creates."""
    t = type(op)
    return t is m.FsMknod and stat.S_ISREG(op.mode) or t is m.FsSetattr and op.fields.size is not None \
        or t in (m.FsLayout, m.FsReserveInodes)


def _encrypting(bucket: str) -> errors.EncryptedObject:
    """The mount's writer stores plaintext blocks, and a bucket that encrypts new objects takes none: refused where
    the write begins (open, truncate, the first write), so the caller sees EACCES there, before anything is changed.
    Refused only at the commit (fs_write), `echo new > file` had emptied the file (O_TRUNC) and lost the new bytes
    with an error at close that the shell ignores."""
    return errors.EncryptedObject(f"bucket {bucket} encrypts new objects server-side: the mount can't write its "
                                  "files (write them through S3)")


@extension("POST", "fs")
async def fs_op(ctx, req):
    try:
        op = _decode_op(await read_all(req.receive, 1 << 20))
    except msgspec.ValidationError as e:  # an unknown op, a field missing, a number out of range
        raise errors.InvalidInput(f"Bad POSIX request: {e}") from None
    except msgspec.DecodeError:
        raise S3Error("MalformedJSON", "The body must be a JSON request {\"op\": ..., ...}.", 400) from None
    FS_REQUESTS.labels(op_name(type(op))[3:]).inc()
    nn = ctx.cluster.namenode
    try:
        if type(op) is m.FsStatfs:
            return _answer({"r": await nn.fs_statfs()})
        bi = None
        if req.bucket is not None:
            bi = await _bucket_ino(ctx, req, "read" if type(op) in READ_OPS else "write")
            if _writes_content(op) and (await ctx.bucket(req.bucket)).encryption is not None:
                raise _encrypting(req.bucket)
        # the scope is the gateway's to set, and so are the bucket charged for a change of its usage and the owner of
        # reserved inode numbers (the caller's access key); a stale read keeps the caller's log position (from
        # msync: read-your-writes; one made up only sends that caller's reads to the active NameNode)
        op = msgspec.structs.replace(op, bi=bi, **({"bucket": req.bucket} if hasattr(op, "bucket") else {}),
                                     **({"owner": req.user.access_key} if hasattr(op, "owner") else {}))
        res = await _FORWARD[type(op)](nn, op)
        if type(op) is m.FsLayout:  # the size new extents are cut into (fs_write), for the mount's writer
            res = msgspec.structs.replace(res, bs=await ctx.cluster.block_size(req.bucket))
        if bi is None and type(op) is m.FsReaddir:
            res = msgspec.structs.replace(res, entries=await _visible_buckets(ctx, req, res.entries))
        return _answer({"r": res})
    except errors.DomainError as e:
        if not _posix_answer(e):
            raise
        return _answer(_error(e))


@extension("GET", "fs")
async def fs_read(ctx, req):
    FS_REQUESTS.labels("locate" if req.query.get("locate") else "read").inc()
    if req.bucket is None:
        raise errors.InvalidInput("GET /_epochfs/fs/<bucket>?ino=N: the bucket is missing")
    ino, off, n = _int_arg(req, "ino"), _int_arg(req, "off", 0), _int_arg(req, "len")
    info = await bucket_access(ctx, req, "read", action="s3:ListBucket")
    try:
        res = await ctx.cluster.namenode.fs_blocks(ino, info.ino, stale=wants_stale(req))
    except errors.OutsideBucket:  # an inode of another bucket: no more said than for any denied request
        raise errors.PermissionDenied("Access Denied") from None
    check_object_read(ctx, req, info, res, action="s3:GetObject", any_key=True)  # and the object's ACL
    end = min(off + n, res.size)
    cipher = None
    if res.sse is not None:  # only a gateway decrypts: no locate (the mount reads through here), no SSE-C
        if req.query.get("locate") or res.sse.alg == "SSE-C":
            raise errors.EncryptedObject(f"inode {ino} is encrypted server-side"
                                         + (" with a customer key: read it through S3 with the key"
                                            if res.sse.alg == "SSE-C" else ": read it through the gateway"))
        cipher = BlockCipher(sse.data_key(ctx, {}, res.sse))
    if req.query.get("locate"):
        pieces = [m.LocatedPiece(id=b.id, offset=boff, length=k, nodes=b.nodes)
                  for b, boff, k in plan_range(res.blk, off, end)] if end > off else []
        grant = readtoken.issue(ctx.settings.cluster_secret, (p.id for p in pieces))
        return _answer(m.FileLocated(etag=res.etag, size=res.size, pieces=pieces, addrs=res.addrs, grant=grant))
    if end <= off:
        return Response(200, [("x-epochfs-etag", res.etag)], b"")
    pieces = [p async for p in ctx.cluster.read_range(res.blk, res.addrs, off, end, cipher=cipher)]
    return Response(200, [("x-epochfs-etag", res.etag)], pieces[0] if len(pieces) == 1 else b"".join(pieces))


async def _discard(receive, limit: int) -> None:
    """Take in up to `limit` bytes of a refused request's body: a client still sending it when the answer comes
    and the connection closes sees a reset instead of the error (httpx: ReadError)."""
    got = 0
    async for piece in raw_body(receive):
        got += len(piece)
        if got > limit:
            return


class _Body:
    """A request body read in pieces of exact lengths: the layout's header, then each new extent's bytes."""

    def __init__(self, stream) -> None:
        self._it, self._left = stream.__aiter__(), memoryview(b"")

    async def take(self, n: int):
        while n > 0:
            if not self._left:
                try:
                    self._left = memoryview(await self._it.__anext__())
                except StopAsyncIteration:
                    raise errors.InvalidInput("the body ends before the layout's extents do") from None
                continue
            piece, self._left = self._left[:n], self._left[n:]
            n -= len(piece)
            yield piece

    async def rest(self):
        """What is left of the body, to its end."""
        if self._left:
            yield self._left
            self._left = memoryview(b"")
        async for piece in self._it:
            yield piece

    async def read(self, n: int) -> bytes:
        return b"".join([bytes(p) async for p in self.take(n)])


MAX_ALLOC_BLOCKS = 4096  # blocks in one write token (a mount streaming a larger file asks again)
MAX_DIRECT_BODY = 8 << 20  # a direct commit's JSON: receipts and tokens
_decode_direct = msgspec.json.Decoder(m.FileWriteDirect).decode
MAX_FILES = 1000         # files in one batch create
MAX_FILES_BODY = 32 << 20  # its body: under a DataNode call's 64 MiB payload bound
_decode_new_files = msgspec.json.Decoder(m.NewFiles).decode


def _hash_files(items: list[m.NewFile], data: memoryview, bs: int) -> list[tuple[str, list]]:
    """In a worker thread (hashlib and crc32c let go of the GIL): each file's ETag and its blocks with their CRC32C."""
    out, pos = [], 0
    for f in items:
        piece = data[pos:pos + f.size]
        pos += f.size
        out.append((f'"{hashlib.md5(piece).hexdigest()}"',
                    [(piece[o:o + bs], crc32c(piece[o:o + bs])) for o in range(0, f.size, bs)]))
    return out


async def fs_create_files(ctx, req, bi: int):
    """PUT /_epochfs/fs/<bucket>?files=1 (see the module's doc): checked as a whole first (the bucket's write
    permission, done by the caller; Content-Length at most MAX_FILES_BODY; at most MAX_FILES files whose sizes add
    up to the body), then stored and created; a file refused is its own error and the others are made."""
    FS_REQUESTS.labels("create_files").inc()
    length = req.headers.get("content-length")
    if length is None or "transfer-encoding" in req.headers:
        raise S3Error("MissingContentLength", "You must provide the Content-Length HTTP header.", 411)
    length = args.int_arg(length, "content-length", 0, hi=args.MAX_INT)
    if length > MAX_FILES_BODY:
        raise S3Error("EntityTooLarge", f"A batch create holds at most {MAX_FILES_BODY} bytes; this one has "
                      f"{length}.", 400, ProposedSize=length, MaxSizeAllowed=MAX_FILES_BODY)
    stream, _ = body_stream(req.receive, req.headers, req.auth)
    body = _Body(stream)
    try:
        n = int.from_bytes(await body.read(4), "big")
        if n > length:
            raise errors.InvalidInput("the index is longer than the body")
        items = _decode_new_files(await body.read(n)).items
    except msgspec.DecodeError as e:
        raise S3Error("MalformedJSON", f"The body must start with an index {{\"items\": [...]}}: {e}", 400) from None
    if not 0 < len(items) <= MAX_FILES:
        raise errors.InvalidInput(f"a batch create holds 1 to {MAX_FILES} files; this one has {len(items)}")
    total = sum(f.size for f in items)
    if 4 + n + total != length:
        raise errors.InvalidInput(f"the file sizes add up to {total} bytes, the body holds {length - 4 - n}")
    if (await ctx.bucket(req.bucket)).encryption is not None:
        raise _encrypting(req.bucket)
    data = memoryview(await body.read(total))
    bs = await ctx.cluster.block_size(req.bucket)
    hashed = await asyncio.to_thread(_hash_files, items, data, bs)
    written = await ctx.cluster.write_many(req.bucket, [blocks for _, blocks in hashed])
    out: list = [None] * len(items)
    todo, where, ids = [], [], []
    for i, (f, (etag, _), w) in enumerate(zip(items, hashed, written)):
        if isinstance(w, errors.DomainError):
            out[i] = _error(w)
            continue
        todo.append(m.StoredFile(f=f, blk=list(w), etag=etag))
        where.append(i)
        ids += w
    if todo:
        try:
            res = await ctx.cluster.namenode.fs_create_files(m.FsCreateFiles(items=todo, bucket=req.bucket, bi=bi,
                                                                             owner=req.user.access_key))
        except BaseException:
            await ctx.abandon(ids)
            raise
        failed = []
        for i, item, r in zip(where, todo, res.items):
            out[i] = {"a": r.a, "layout": r.layout, "bs": bs} if r.a is not None else {"err": r.err, "msg": r.msg}
            if r.a is None:
                failed += item.blk
        if failed:
            await ctx.abandon(failed)
    return _answer({"r": {"items": out}})


async def fs_allocate(ctx, req):
    """PUT /_epochfs/fs/<bucket>?alloc=N: a write token for N new blocks (at most MAX_ALLOC_BLOCKS) of the bucket,
    for the mount to store a file's content on the DataNodes itself (common/directwrite.py) and commit it with
    fs_write_direct. The caller's write permission on the bucket is checked (by fs_write) first."""
    FS_REQUESTS.labels("allocate").inc()
    n = args.int_arg(req.query.get("alloc"), "alloc", 1, lo=1, hi=MAX_ALLOC_BLOCKS,
                     msg=f"alloc must be a block count from 1 to {MAX_ALLOC_BLOCKS}")
    alloc = await ctx.cluster.namenode.allocate(req.bucket, count=n, seed=int.from_bytes(os.urandom(8), "big") >> 1)
    grant = writetoken.issue(ctx.settings.cluster_secret, bucket=req.bucket, who=req.auth.user.access_key,
                             alloc=alloc)
    return _answer(grant)


async def fs_write_direct(ctx, req, bi: int):
    """PUT /_epochfs/fs/<bucket>?ino=N&direct=1: new content of file N, all of it, stored on the DataNodes by the
    mount with the write tokens of fs_allocate (body: a m.FileWriteDirect). As a direct object commit
    (gateway/s3/direct.py): each receipt must be a DataNode's for a block of the caller's tokens for this bucket,
    every block but the last full, and the NameNode takes only blocks never committed (fresh); then as fs_write's
    commit (base version, mtime and held attributes, quota, write policy). ETag: the MD5 of one block, else the
    multipart form."""
    FS_REQUESTS.labels("write_direct").inc()
    ino = _int_arg(req, "ino")
    try:
        body = _decode_direct(await read_all(req.receive, MAX_DIRECT_BODY))
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise S3Error("MalformedJSON", f"The body must be a FileWriteDirect: {e}", 400) from None
    blocks, size, _ = direct.written(ctx, body.receipts, direct.granted(ctx, req, body.grants))
    etag = f'"{writetoken.object_etag([r.digest for r in body.receipts])}"'
    try:
        attr = await ctx.cluster.namenode.fs_commit(m.FsCommit(ino=ino, blk=blocks, size=size, etag=etag,
                                                               bucket=req.bucket, bi=bi, base=body.base, mt=body.mt,
                                                               held=body.held, fresh=True))
    except errors.DomainError as e:
        await ctx.cluster.abandon([b.id for b in blocks])  # only blocks still pending are given back
        if isinstance(e, errors.NotEnoughReplicas):
            ctx.cluster.forget_bucket(req.bucket)
        if not _posix_answer(e):
            raise
        return _answer(_error(e))
    return _answer({"r": msgspec.structs.replace(attr, bs=await ctx.cluster.block_size(req.bucket))})


@extension("PUT", "fs")
async def fs_write(ctx, req):
    """New content for file `ino`. The body is a 4-byte length and a JSON layout (m.FileWrite) {"base": ETag or
    null, "size": N, "segs": [["k", block id] | ["n", length], ...]}, then the bytes of the "n" extents in order:
    "k" keeps a block of the version `base` names, "n" is new data stored as new blocks (or "segs" [["r"]], size 0: the whole content is new and is
    the rest of the body, whose length the sender need not know when it starts: the mount streams a file being
    written while it grows). So a write into a large file sends and
    stores only the blocks it changed. The ETag is the content's MD5 when all of it is new; otherwise it can't be
    had without reading the kept blocks, and is an MD5 over the new bytes and the layout with the block count
    after a dash, as multipart ETags are (S3 clients don't take those for an MD5), changing whenever the content
    does. An optional "mt" (ns) is the mtime the file takes instead of the commit's time: one set with utimens
    after the last write."""
    if req.bucket is None:
        raise errors.InvalidInput("PUT /_epochfs/fs/<bucket>?ino=N: the bucket is missing")
    try:
        bi = await _bucket_ino(ctx, req, "write")
        if (await ctx.bucket(req.bucket)).encryption is not None:
            raise _encrypting(req.bucket)
    except (S3Error, errors.PermissionDenied):
        await _discard(req.receive, 1 << 20)
        raise
    if req.query.get("files"):
        return await fs_create_files(ctx, req, bi)
    if req.query.get("alloc"):
        return await fs_allocate(ctx, req)
    if req.query.get("direct"):
        return await fs_write_direct(ctx, req, bi)
    FS_REQUESTS.labels("write").inc()
    ino = _int_arg(req, "ino")
    stream, _ = body_stream(req.receive, req.headers, req.auth)
    body = _Body(stream)
    try:
        layout = _decode_layout(await body.read(int.from_bytes(await body.read(4), "big")))
    except msgspec.DecodeError as e:  # not JSON, or not a layout (a field missing, a number out of range)
        raise S3Error("MalformedJSON", "The body must start with a layout {\"base\", \"size\", \"segs\"[, "
                      f"\"mt\"]}}: {e}", 400) from None
    md5 = hashlib.md5()
    blk: list = []
    written: list = []
    committing = False
    try:
        streamed = any(type(seg) is m.RestOfBody for seg in layout.segs)
        if streamed and (len(layout.segs) != 1 or layout.size):
            raise errors.InvalidInput("a layout with a RestOfBody has no other segment and size 0")
        size = layout.size
        if sum(seg.length for seg in layout.segs if type(seg) in (m.NewExtent, m.ZeroExtent)) > \
                ctx.settings.max_object_size:  # (before a block of zeros is made: they cost no body bytes)
            raise errors.EntityTooLarge(f"a file write of more than {ctx.settings.max_object_size} new bytes")
        if streamed:
            blk, size = await ctx.cluster.write_stream(req.bucket, body.rest(), md5.update,
                                                       limit=ctx.settings.max_object_size)
            written += blk
        for seg in [] if streamed else layout.segs:
            if type(seg) is m.KeepBlock:
                blk.append(seg.id)
            elif type(seg) is m.ZeroExtent:  # blocks of zeros, made here (the ETag below is the layout's)
                piece = await ctx.cluster.block_size(req.bucket)
                new, _ = await ctx.cluster.write_stream(req.bucket, _zero_stream(seg.length, piece), _unhashed,
                                                        limit=ctx.settings.max_object_size)
                written += new
                blk += new
            elif seg.length:
                new, _ = await ctx.cluster.write_stream(req.bucket, body.take(seg.length), md5.update,
                                                        limit=ctx.settings.max_object_size)
                written += new
                blk += new
        if any(type(seg) in (m.KeepBlock, m.ZeroExtent) for seg in layout.segs):  # the MD5 over the new bytes
            # and the layout's segs as they were sent (kept blocks and zeros are not hashed)
            etag = f'"{hashlib.md5(md5.digest() + msgspec.json.encode(layout.segs)).hexdigest()}-{len(blk)}"'
        else:
            etag = f'"{md5.hexdigest()}"'
        committing = True
        attr = await ctx.cluster.namenode.fs_commit(m.FsCommit(ino=ino, blk=blk, size=size, etag=etag,
                                                               bucket=req.bucket, bi=bi, base=layout.base,
                                                               mt=layout.mt, held=layout.held))
    except errors.DomainError as e:
        await ctx.abandon(written)
        if isinstance(e, errors.NotEnoughReplicas):  # blocks leased before the bucket's write policy changed
            ctx.cluster.forget_bucket(req.bucket)
        if not (committing and _posix_answer(e)):
            raise
        return _answer(_error(e))
    except BaseException:
        await ctx.abandon(written)
        raise
    return _answer({"r": msgspec.structs.replace(attr, bs=await ctx.cluster.block_size(req.bucket))})
