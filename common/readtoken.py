"""Read tokens: the gateway lets a native client read a batch's blocks straight from the DataNodes.

Proxying a batch of small samples through the gateway costs the gateway a receive and a send of every byte; a loader
that can reach the DataNodes skips that hop. The gateway checks the caller's rights as for GetObject, then signs
(expiry, the batch's block ids) with a key derived from the cluster secret; a DataNode serves tokened reads of exactly
those blocks until the expiry, on connections that never saw the cluster secret (and so can do nothing else).
"""
from __future__ import annotations

import hashlib
import hmac
import struct
import time
from typing import Iterable

from . import errors
from .messages import ReadGrant

TTL_S = 60


def _key(secret: str) -> bytes:
    """A key of its own, so that a token never reveals anything usable as the cluster secret."""
    return hashlib.sha256(b"epochfs read token\0" + secret.encode()).digest()


def _mac(secret: str, blocks: Iterable[int], expires: int) -> str:
    ids = sorted({int(b) for b in blocks})
    msg = struct.pack(f">q{len(ids)}Q", expires, *ids)
    return hmac.new(_key(secret), msg, hashlib.sha256).hexdigest()


def issue(secret: str, blocks: Iterable[int], ttl_s: float = TTL_S) -> ReadGrant:
    """What a client shows a DataNode with its reads: the blocks, their expiry (unix seconds) and the MAC."""
    ids = sorted({int(b) for b in blocks})
    exp = int(time.time() + ttl_s)
    return ReadGrant(blocks=ids, exp=exp, tok=_mac(secret, ids, exp))


def check(secret: str, grant: ReadGrant, wanted: Iterable[int]) -> None:
    """Raise Unauthorized unless `grant` is a live token of ours covering every block in `wanted`."""
    if grant.exp < time.time():
        raise errors.Unauthorized("read token expired")
    try:
        good = hmac.compare_digest(_mac(secret, grant.blocks, grant.exp).encode(), grant.tok.encode())
    except struct.error:  # an id or expiry out of range: not one of ours
        good = False
    if not good:
        raise errors.Unauthorized("bad read token")
    missing = set(wanted) - set(grant.blocks)
    if missing:
        raise errors.Unauthorized(f"the read token does not cover block(s) {sorted(missing)[:5]}")
