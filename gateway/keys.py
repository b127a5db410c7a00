"""The access keys a gateway accepts: the bootstrap users of GW_USERS, plus keys stored on the NameNode (made through
the admin API), fetched when first seen and cached for KEY_TTL_S, so a new key works at once on every gateway and a
disabled or deleted one stops working within KEY_TTL_S (at once on the gateway that changed it)."""
from __future__ import annotations

import hashlib
import re
import time

from epochfs.common import errors
from epochfs.common.messages import AccessKeyRecord
from epochfs.common.metrics import CACHE_REQUESTS

from .s3.sigv4 import User

KEY_TTL_S = 2.0
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def access_key_of(headers: dict[str, str], query: dict[str, str]) -> str | None:
    """The access key a request claims (SigV4 or V2, header or presigned), before its signature is checked."""
    auth = headers.get("authorization")
    if auth is not None:
        if auth.startswith("AWS "):
            return auth[4:].strip().rpartition(":")[0] or None
        m = _CREDENTIAL.search(auth)
        return m.group(1) if m else None
    cred = query.get("X-Amz-Credential")
    if cred is not None:
        return cred.split("/", 1)[0]
    return query.get("AWSAccessKeyId")


def user_of(rec: AccessKeyRecord) -> User:
    ak = rec.access_key
    return User(ak, rec.secret_key, rec.owner_id or hashlib.sha256(ak.encode()).hexdigest(), rec.name or ak,
                admin=rec.admin, buckets=dict(rec.buckets))


class KeyRegistry:
    """A mapping access key -> User for the SigV4 verifier (`get`), filled ahead of verification by `load`."""

    def __init__(self, bootstrap: list[User], cluster) -> None:
        self.bootstrap = {u.access_key: u for u in bootstrap}
        self.cluster = cluster
        self._stored: dict[str, tuple[float, User | None]] = {}  # None: unknown or disabled

    def get(self, access_key: str) -> User | None:
        u = self.bootstrap.get(access_key)
        if u is not None:
            return u
        hit = self._stored.get(access_key)
        return hit[1] if hit is not None else None

    async def load(self, access_key: str | None) -> None:
        """Make `get(access_key)` current: fetch a stored key from the NameNode unless fetched within KEY_TTL_S.
        While the NameNode is unreachable a key seen before keeps its last state."""
        if not access_key or access_key in self.bootstrap:
            return
        hit = self._stored.get(access_key)
        now = time.monotonic()
        if hit is not None and now - hit[0] < KEY_TTL_S:
            CACHE_REQUESTS.labels("access_keys", "hit").inc()
            return
        CACHE_REQUESTS.labels("access_keys", "miss").inc()
        try:
            rec = await self.cluster.namenode.key_get(access_key)
            user = None if rec.disabled else user_of(rec)
        except errors.NotFound:
            user = None
        except errors.Unavailable:
            if hit is None:
                raise
            user = hit[1]
        if len(self._stored) > 100_000:  # bogus keys must not grow the cache without bound
            self._stored.clear()
        self._stored[access_key] = (now, user)

    def forget(self, access_key: str) -> None:
        self._stored.pop(access_key, None)
