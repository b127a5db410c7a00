"""Buckets: usage, object count, block size, replication factor, write policy and quotas. POST creates a bucket with
its settings; PATCH changes the settings (a new block size or replication factor applies to new writes only)."""
from __future__ import annotations

from fastapi import APIRouter, HTTPException

import datetime as dt

from epochfs.common import errors, lifecycle, tagging
from epochfs.common.messages import BucketRecord, LifecycleFilter, Unset
from epochfs.common.messages import LifecycleRule as Rule

from ..s3.bucket import validate_bucket_name
from ..s3.errors import S3Error
from .auth import AdminDep
from .common import BAD_BODY, CtxDep
from .models import Bucket, BucketCreate, BucketPatch, LifecycleRule

router = APIRouter(tags=["buckets"])
_CLEARABLE = ("quota_bytes", "quota_objects")  # null removes the quota
_DAY_NS = 86_400 * 10 ** 9


def rule_view(r: Rule) -> LifecycleRule:
    f = r.filter or LifecycleFilter(prefix=r.prefix)
    date = dt.datetime.fromtimestamp(r.expiration_date / 1e9, dt.timezone.utc).date() \
        if r.expiration_date is not None else None
    return LifecycleRule(id=r.id, enabled=r.enabled, prefix=f.prefix or "", tags=f.tags, size_gt=f.size_gt,
                         size_lt=f.size_lt, expiration_days=r.expiration_days, expiration_date=date,
                         expired_object_delete_marker=r.expired_object_delete_marker,
                         noncurrent_days=r.noncurrent_days, newer_noncurrent=r.newer_noncurrent,
                         abort_upload_days=r.abort_upload_days)


def rule_of(m: LifecycleRule) -> Rule:
    conditions = int(bool(m.prefix)) + len(m.tags) + (m.size_gt is not None) + (m.size_lt is not None)
    date = None
    if m.expiration_date is not None:
        midnight = dt.datetime.combine(m.expiration_date, dt.time(), dt.timezone.utc)
        date = int(midnight.timestamp()) * 10 ** 9
    return Rule(id=m.id, enabled=m.enabled,
                filter=LifecycleFilter(prefix=m.prefix if m.prefix or conditions == 0 else None, tags=m.tags,
                                       size_gt=m.size_gt, size_lt=m.size_lt, and_=conditions > 1),
                expiration_days=m.expiration_days, expiration_date=date,
                expired_object_delete_marker=m.expired_object_delete_marker, noncurrent_days=m.noncurrent_days,
                newer_noncurrent=m.newer_noncurrent, abort_upload_days=m.abort_upload_days)


def bucket_view(b: BucketRecord, usage: tuple[int, int]) -> Bucket:
    return Bucket(name=b.name, owner=b.owner, created=b.created, bytes=usage[0], objects=usage[1],
                  replication=b.replication, block_size=b.block_size, write_policy=b.write_policy or "async",
                  quota_bytes=b.quota_bytes, quota_objects=b.quota_objects, versioning=b.versioning,
                  tags=b.tags, lifecycle=[rule_view(r) for r in b.lifecycle] if b.lifecycle else None)


@router.get("/buckets", response_model=list[Bucket])
async def list_buckets(_: AdminDep, ctx: CtxDep) -> list[Bucket]:
    buckets = await ctx.cluster.namenode.bucket_list()
    usage = await ctx.cluster.namenode.bucket_usage()
    return [bucket_view(b, usage.get(b.name, (0, 0))) for b in buckets]


async def _one(ctx, name: str) -> Bucket:
    info = await ctx.cluster.namenode.bucket_info(name)
    usage = (await ctx.cluster.namenode.bucket_usage(name))[name]
    return bucket_view(info, usage)


@router.post("/buckets", response_model=Bucket, status_code=201,
             responses={**BAD_BODY, 400: {"description": "invalid bucket name"}, 409: {"description": "bucket exists"}})
async def create_bucket(req: BucketCreate, user: AdminDep, ctx: CtxDep) -> Bucket:
    """A new bucket, owned by `owner_id` (default: the caller), with its own block size, replication factor and
    write policy (each left out: the cluster's default)."""
    try:
        validate_bucket_name(req.name)
    except S3Error as e:
        raise HTTPException(400, e.message) from None
    try:
        await ctx.cluster.namenode.bucket_create(req.name, owner=req.owner_id or user.owner_id,
                                                 block_size=req.block_size, replication=req.replication,
                                                 write_policy=req.write_policy)
    except errors.Conflict as e:  # BucketAlreadyOwnedByYou too: the settings asked for were not applied
        raise HTTPException(409, e.message) from None
    ctx.forget_bucket(req.name)
    return await _one(ctx, req.name)


@router.get("/buckets/{name}", response_model=Bucket, responses={404: {"description": "no such bucket"}})
async def get_bucket(name: str, _: AdminDep, ctx: CtxDep) -> Bucket:
    return await _one(ctx, name)


@router.patch("/buckets/{name}", response_model=Bucket,
              responses={**BAD_BODY, 404: {"description": "no such bucket"},
                         409: {"description": "tags or lifecycle rules that S3's rules refuse (the reason in detail)"}})
async def patch_bucket(name: str, patch: BucketPatch, _: AdminDep, ctx: CtxDep) -> Bucket:
    """Change block size or replication factor (both for blocks written from now on: existing objects keep
    theirs), write policy or quotas. A quota set to null is removed."""
    given = patch.model_dump(exclude_unset=True)
    tags, rules = given.pop("tags", ...), given.pop("lifecycle", ...)
    # every part is checked before any is applied: a bad tag set or rule changes nothing. What S3 refuses beyond
    # the schema (a tag's characters, a key twice, rules contradicting each other) answers 409 with S3's reason:
    # the request is well-formed, its parts conflict with S3's rules.
    try:
        if tags is not ... and tags is not None:
            tags = tagging.check(tags, tagging.MAX_BUCKET_TAGS)
        if rules is not ... and rules is not None:
            rules = lifecycle.check([rule_of(r) for r in patch.lifecycle])
    except errors.InvalidInput as e:
        raise HTTPException(409, e.message) from None
    changes = {k: Unset() if v is None else v for k, v in given.items() if v is not None or k in _CLEARABLE}
    await ctx.cluster.namenode.bucket_settings(name, **changes)  # 404 if there is no such bucket
    if tags is not ...:
        await ctx.cluster.namenode.bucket_tags(name, tags)
    if rules is not ...:
        await ctx.cluster.namenode.bucket_lifecycle(name, Unset() if rules is None else rules)
    ctx.forget_bucket(name)
    return await _one(ctx, name)
