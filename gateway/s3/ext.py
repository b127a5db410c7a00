"""epochfs's own extensions of the S3 API, reached at /_epochfs/<name>[/<bucket>[/<key>]].

No valid bucket name starts with "_", so a plain S3 client never lands here. Requests are signed with SigV4 like any
S3 request (anonymous requests are refused) and answer with S3's error XML. An extension module registers its
handlers with `@extension("METHOD", "name")` and is imported by the router; the handler sees the request with
`bucket`/`key` rewritten to what follows the extension's name.
"""
from __future__ import annotations

from typing import Awaitable, Callable

import msgspec

from epochfs.common import errors
from epochfs.common import messages as m

from . import args
from .errors import S3Error
from .http import Response

EXT_BUCKET = "_epochfs"

Handler = Callable[..., Awaitable]
_HANDLERS: dict[tuple[str, str], Handler] = {}


def extension(method: str, name: str):
    def register(fn: Handler) -> Handler:
        _HANDLERS[(method, name)] = fn
        return fn
    return register


def wants_stale(req) -> m.StaleOk | None:
    """`?stale=1`: the caller accepts an answer up to NN_STALE_READ_MAX_S old, which a standby NameNode may give
    (messages.StaleOk); with `&min_seq=N` (a log position from GET /_epochfs/msync) only one that applied at least
    that far: the caller's own writes before it are seen (read-your-writes). Only the dataset readers' calls honour
    it (the manifest, batch reads and locates, the mount's reads by inode); S3's own calls are always answered by
    the active NameNode (read-after-write)."""
    if req.query.get("stale") not in ("1", "true"):
        return None
    return m.StaleOk(min_seq=args.int_arg(req.query.get("min_seq"), "min_seq", 0, hi=args.MAX_INT,
                                          msg="min_seq must be an integer from 0 to 2^63-1"))


@extension("GET", "msync")
async def msync(ctx, req):
    """The active NameNode's log position (HDFS's msync), {"seq": N}: a client's stale reads sent with
    `min_seq=N` see every write acknowledged to it before this call."""
    return Response(200, [("content-type", "application/json")],
                    msgspec.json.encode({"seq": await ctx.cluster.namenode.log_position()}))


def resolve(req) -> Handler:
    """Pick the handler for /_epochfs/<name>/... and point req.bucket/req.key at the rest of the path."""
    if req.auth is None:
        raise S3Error("AccessDenied", "epochfs extensions need a signed request.", 403)
    name, _, rest = (req.key or "").partition("/")
    handler = _HANDLERS.get((req.method, name))
    if handler is None:
        if any(n == name for _, n in _HANDLERS):
            raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")
        raise S3Error("InvalidRequest", f"Unknown epochfs extension {name!r}.", 400)
    bucket, _, key = rest.partition("/")
    req.bucket, req.key = bucket or None, key or None
    return handler
