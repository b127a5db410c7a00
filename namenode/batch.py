"""Calls for training loaders (through the gateway's /_epochfs/batch and /_epochfs/manifest): many keys per RPC.

A loader reads a batch of ~64 small samples at a time and lists a dataset of millions of files once per job; both
would cost one NameNode round trip per key through the plain S3 calls.
"""
from __future__ import annotations

from epochfs.common import errors

from .metastore import MetaStore

# what the gateway needs of a record to check access and read it; the rest of the inode stays here
_READ_FIELDS = ("size", "etag", "mt", "blk", "acl")
MAX_STAT = 10_000
MAX_MANIFEST_PAGE = 100_000


def handlers(meta: MetaStore, members) -> dict:
    async def stat_many(a, _):
        """[[bucket, key], ...] -> {"objs": [record or {"err": class, "msg": text}, ...], "addrs": {node: addr}}:
        each record holds only what a read needs, and addrs covers the holders of every block listed."""
        items = a["items"]
        if len(items) > MAX_STAT:
            raise errors.InvalidInput(f"at most {MAX_STAT} keys per stat_many")
        out, ids = [], set()
        for bucket, key in items:
            try:
                rec = meta.stat(bucket, key)
            except errors.DomainError as e:
                out.append({"err": type(e).__name__, "msg": e.message})
                continue
            out.append({f: rec[f] for f in _READ_FIELDS if f in rec})
            ids.update(n for blk in rec.get("blk", ()) for n in blk[3])
        return {"objs": out, "addrs": members.addrs(ids)}

    async def manifest(a, _):
        """One page of every key under a prefix, from the directory entries' listing summaries (no inode read):
        {"items": [[key, size, etag, mtime_ns], ...], "truncated": bool}, in S3 order after `after`."""
        limit = min(int(a.get("limit", 10_000)), MAX_MANIFEST_PAGE)
        page = meta.list_objects(a["bucket"], a.get("prefix", ""), "", a.get("after", ""), limit)
        return {"items": [it[1:5] for it in page["items"]], "truncated": page["truncated"]}

    return {f.__name__: f for f in (stat_many, manifest)}
