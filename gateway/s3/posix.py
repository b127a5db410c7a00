"""The mount's API: POSIX operations by inode at /_epochfs/fs[/<bucket>] (see namenode/posix.py).

  POST /_epochfs/fs            {"op": "lookup", "args": {...}} -> {"r": result} or {"err": class, "msg", "errno"}
  GET  /_epochfs/fs?ino=&off=&len=   bytes [off, off+len) of the file (short at its end)
  PUT  /_epochfs/fs/<bucket>?ino=    the file's whole new content; blocks go to the bucket's DataNodes, then one
                                     NameNode commit replaces the old content -> {"r": attributes}
  POST /_epochfs/fs with op "statfs" -> capacity, used and inode counts

Namespace errors travel as JSON with their errno (a POSIX answer, not an S3 failure); the data calls answer S3 error
XML like any S3 request. Requests are SigV4-signed; permissions inside the tree are POSIX's, checked by the kernel
from mode/uid/gid (the mount runs with default_permissions).
"""
from __future__ import annotations

import hashlib

import orjson
from prometheus_client import Counter

from epochfs.common import errors

from .access import bucket_access
from .body import body_stream, read_all
from .errors import S3Error, invalid_argument
from .ext import extension
from .http import Response

FS_REQUESTS = Counter("epochfs_fs_requests_total", "Mount API requests", ["op"])
JSON = [("content-type", "application/json")]


def _int_arg(req, name: str, default: int | None = None) -> int:
    v = req.query.get(name)
    if v is None and default is not None:
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        raise invalid_argument(f"{name} must be an integer", ArgumentName=name) from None


def _answer(res: dict) -> Response:
    return Response(200, JSON, orjson.dumps(res))


def _error(e: errors.DomainError) -> dict:
    return {"err": type(e).__name__, "msg": e.message, "errno": e.details.get("errno")}


@extension("POST", "fs")
async def fs_op(ctx, req):
    try:
        body = orjson.loads(await read_all(req.receive, 1 << 20))
        op, args = body["op"], body.get("args") or {}
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise S3Error("MalformedJSON", "The body must be {\"op\": ..., \"args\": {...}}.", 400) from None
    FS_REQUESTS.labels(op).inc()
    try:
        if op == "statfs":
            return _answer({"r": await ctx.cluster.nn("fs_statfs")})
        return _answer(await ctx.cluster.nn("fs", name=op, args=args))
    except errors.DomainError as e:
        if e.details.get("errno") is None:
            raise
        return _answer(_error(e))


@extension("GET", "fs")
async def fs_read(ctx, req):
    FS_REQUESTS.labels("read").inc()
    ino, off, n = _int_arg(req, "ino"), _int_arg(req, "off", 0), _int_arg(req, "len")
    if off < 0 or n < 0:
        raise invalid_argument("off and len must not be negative")
    res = await ctx.cluster.nn("fs_blocks", ino=ino)
    end = min(off + n, res["size"])
    if end <= off:
        return Response(200, [("x-epochfs-etag", res["etag"])], b"")
    pieces = [p async for p in ctx.cluster.read_range(res["blk"], res["addrs"], off, end)]
    return Response(200, [("x-epochfs-etag", res["etag"])], pieces[0] if len(pieces) == 1 else b"".join(pieces))


@extension("PUT", "fs")
async def fs_write(ctx, req):
    FS_REQUESTS.labels("write").inc()
    if req.bucket is None:
        raise invalid_argument("PUT /_epochfs/fs/<bucket>?ino=N: the bucket is missing")
    await bucket_access(ctx, req, "write")
    ino = _int_arg(req, "ino")
    md5 = hashlib.md5()
    stream, _ = body_stream(req.receive, req.headers, req.auth)
    blocks, size = await ctx.cluster.write_stream(req.bucket, stream, md5.update,
                                                  limit=ctx.settings.max_object_size)
    try:
        attr = await ctx.cluster.nn("fs_commit", ino=ino, blk=blocks, size=size, etag=f'"{md5.hexdigest()}"',
                                    bucket=req.bucket)
    except errors.DomainError as e:
        await ctx.abandon(blocks)
        if e.details.get("errno") is None:
            raise
        return _answer(_error(e))
    except BaseException:
        await ctx.abandon(blocks)
        raise
    return _answer({"r": attr})
