"""epochfs's own extensions of the S3 API, reached at /_epochfs/<name>[/<bucket>[/<key>]].

No valid bucket name starts with "_", so a plain S3 client never lands here. Requests are signed with SigV4 like any
S3 request (anonymous requests are refused) and answer with S3's error XML. An extension module registers its
handlers with `@extension("METHOD", "name")` and is imported by the router; the handler sees the request with
`bucket`/`key` rewritten to what follows the extension's name.
"""
from __future__ import annotations

from typing import Awaitable, Callable

from epochfs.common import errors

from .errors import S3Error

EXT_BUCKET = "_epochfs"

Handler = Callable[..., Awaitable]
_HANDLERS: dict[tuple[str, str], Handler] = {}


def extension(method: str, name: str):
    def register(fn: Handler) -> Handler:
        _HANDLERS[(method, name)] = fn
        return fn
    return register


def wants_stale(req) -> bool:
    """`?stale=1`: the caller accepts an answer up to NN_STALE_READ_MAX_S old, which a standby NameNode may give
    (messages.StaleOk). Only the dataset readers' calls honour it (the manifest, batch reads and locates, the mount's
    reads by inode); S3's own calls are always answered by the active NameNode (read-after-write)."""
    return req.query.get("stale") in ("1", "true")


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
