"""Bucket quotas, checked early: a PUT or UploadPart that cannot fit is refused before its body is read.

The NameNode checks every commit against the quota in the commit's own batch (the authoritative check); this one
only saves uploading data that would be refused, so it runs only for buckets that have a quota.
"""
from __future__ import annotations

from epochfs.common import errors
from epochfs.common.messages import BucketRecord

from . import args


def declared_length(req) -> int | None:
    n = req.headers.get("x-amz-decoded-content-length") or req.headers.get("content-length")
    return args.digits(n, canonical=False) if n is not None else None


async def precheck(ctx, req, info: BucketRecord, replaces_key: bool) -> None:
    """Refuse with QuotaExceeded if the request's declared body cannot fit in the bucket's byte quota.
    replaces_key: the body becomes the object at req.key (a PUT), so an existing object's size is given back."""
    limit, length = info.quota_bytes, declared_length(req)
    if limit is None or length is None:
        return
    used = (await ctx.cluster.namenode.bucket_usage(req.bucket))[req.bucket].bytes
    if used + length <= int(limit):
        return
    if replaces_key:
        try:
            old = (await ctx.cluster.namenode.stat(req.bucket, req.key)).obj
            used -= 0 if old.delete_marker else old.size
        except errors.NotFound:
            pass
        if used + length <= int(limit):
            return
    raise errors.QuotaExceeded(f"The bucket's quota of {int(limit)} bytes would be exceeded ({used} used, this "
                               f"request adds {length}).", bucket=req.bucket)
