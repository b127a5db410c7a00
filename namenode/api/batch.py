"""Handlers for training loaders (through the gateway's /_epochfs/batch and /_epochfs/manifest): many keys per RPC.

A loader reads a batch of ~64 small samples at a time and lists a dataset of millions of files once per job; both
would cost one NameNode round trip per key through the plain S3 calls.
"""
from __future__ import annotations

import msgspec

from epochfs.common import errors
from epochfs.common import messages as m

from ..membership import Membership
from ..metastore import MetaStore

# what the gateway needs of a record to check access and read it; the rest of the inode stays here
_READ_FIELDS = ("size", "etag", "mt", "blk", "acl", "owner", "sse", "tg")
MAX_STAT = 10_000
MAX_MANIFEST_PAGE = 100_000


def handlers(meta: MetaStore, members: Membership) -> dict:
    async def stat_many(req: m.StatMany, _) -> m.ReadStats:
        if len(req.items) > MAX_STAT:
            raise errors.InvalidInput(f"at most {MAX_STAT} keys per stat_many")
        out, ids = [], set()
        for bucket, key in req.items:
            try:
                rec = meta.stat(bucket, key)
            except errors.DomainError as e:
                out.append(m.ReadStat(error=type(e).__name__, msg=e.message))
                continue
            st = msgspec.convert({f: rec[f] for f in _READ_FIELDS if f in rec}, m.ReadStat)
            out.append(st)
            ids.update(n for blk in st.blk for n in blk.nodes)
        return m.ReadStats(objs=out, addrs=members.addrs(ids))

    async def manifest(req: m.Manifest, _) -> m.ManifestPage:
        page = meta.list_objects(req.bucket, req.prefix, "", req.after, min(req.limit, MAX_MANIFEST_PAGE))
        return m.ManifestPage(items=[m.ManifestItem(*it[1:5]) for it in page["items"]], truncated=page["truncated"])

    return {m.StatMany: stat_many, m.Manifest: manifest}
