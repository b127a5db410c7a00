"""Buckets: usage, object count, block size, replication factor, write policy and quotas. POST creates a bucket with
its settings; PATCH changes the settings (a new block size or replication factor applies to new writes only)."""
from __future__ import annotations

import json

import datetime as dt

from fastapi import APIRouter, HTTPException, Request

from epochfs.common import errors, lifecycle, policy, tagging
from epochfs.common.messages import (BucketEncryption, BucketRecord, BucketUsed, LifecycleFilter, LockRule,
                                     LoggingTarget, ObjectLockConfig, Unset)
from epochfs.common.messages import LifecycleRule as Rule

from ..s3.bucket import validate_bucket_name
from ..s3.errors import S3Error
from ..s3.sse import DEFAULT_KMS_KEY
from .auth import AdminDep
from .common import BAD_BODY, CtxDep
from ..s3.bucket_logging import check_target
from .models import (Bucket, BucketCreate, BucketPatch, KmsKeyCreate, LifecycleRule, Logging, ObjectLock, SseKms,
                     SseS3)
from .models import LockDays, LockYears

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


def _rule(r) -> LockDays | LockYears | None:
    if r is None:
        return None
    return LockDays(mode=r.mode, days=r.days) if r.days is not None else LockYears(mode=r.mode, years=r.years)



def bucket_view(b: BucketRecord, usage: BucketUsed) -> Bucket:
    return Bucket(name=b.name, owner=b.owner, created=b.created, bytes=usage.bytes, objects=usage.objects,
                  replication=b.replication, block_size=b.block_size, write_policy=b.write_policy or "async",
                  quota_bytes=b.quota_bytes, quota_objects=b.quota_objects, versioning=b.versioning,
                  policy=b.policy, policy_public=bool(b.policy) and policy.is_public(policy.parse(b.policy)),
                  public_access_block=None if b.public_access_block is None else {
                      f: getattr(b.public_access_block, f) for f in ("block_public_acls", "ignore_public_acls",
                                                                      "block_public_policy", "restrict_public_buckets")},
                  object_lock=None if b.object_lock is None else ObjectLock(rule=_rule(b.object_lock.rule)),
                  logging=None if b.logging is None else Logging(target_bucket=b.logging.bucket,
                                                                 target_prefix=b.logging.prefix),
                  encryption=None if b.encryption is None else SseS3(alg="AES256") if b.encryption.alg == "AES256"
                  else SseKms(alg="aws:kms", kms_key_id=b.encryption.kms_key),
                  tags=b.tags, lifecycle=[rule_view(r) for r in b.lifecycle] if b.lifecycle else None)


@router.get("/buckets", response_model=list[Bucket])
async def list_buckets(_: AdminDep, ctx: CtxDep) -> list[Bucket]:
    buckets = await ctx.cluster.namenode.bucket_list()
    usage = await ctx.cluster.namenode.bucket_usage()
    return [bucket_view(b, usage.get(b.name, BucketUsed(0, 0))) for b in buckets]


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
                                                 write_policy=req.write_policy, object_lock=req.object_lock)
    except errors.Conflict as e:  # BucketAlreadyOwnedByYou too: the settings asked for were not applied
        raise HTTPException(409, e.message) from None
    ctx.forget_bucket(req.name)
    return await _one(ctx, req.name)


@router.get("/buckets/{name}", response_model=Bucket, responses={404: {"description": "no such bucket"}})
async def get_bucket(name: str, _: AdminDep, ctx: CtxDep) -> Bucket:
    return await _one(ctx, name)


@router.patch("/buckets/{name}", response_model=Bucket,
              responses={**BAD_BODY, 404: {"description": "no such bucket"},
                         409: {"description": "object lock needs versioning Enabled first; the logging target "
                                              "bucket is missing, doesn't let the logging service write, or has "
                                              "a default retention; or "
                                              "tags or lifecycle rules that S3's rules refuse (the reason in "
                                              "detail)"}})
async def patch_bucket(name: str, patch: BucketPatch, _: AdminDep, ctx: CtxDep) -> Bucket:
    """Change block size or replication factor (both for blocks written from now on: existing objects keep
    theirs), write policy, quotas, object lock, logging, default encryption, tags or lifecycle rules. A quota,
    encryption, logging, tag set or lifecycle set to null is removed. (The bucket policy: PUT or DELETE
    /admin/v1/buckets/{name}/policy.)"""
    given = patch.model_dump(exclude_unset=True)
    lock, logging = given.pop("object_lock", None), given.pop("logging", False)
    enc = given.pop("encryption", ...)
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
    info = await ctx.cluster.namenode.bucket_info(name)  # 404 if there is no such bucket
    if lock is not None and info.object_lock is None and info.versioning != "Enabled":
        # checked before anything changes, as the NameNode checks it when it turns object lock on
        raise HTTPException(409, "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration")
    if logging:  # checked as PutBucketLogging checks it, before anything changes
        try:
            await check_target(ctx, info,
                               LoggingTarget(bucket=logging["target_bucket"], prefix=logging.get("target_prefix", "")))
        except errors.InvalidLoggingTarget as e:  # the target bucket's state, not the request's form
            raise HTTPException(409, e.message) from None
    if enc is None:
        changes["no_encryption"] = True
    elif enc is not ...:
        kid = enc.get("kms_key_id")
        try:
            ctx.sse_keys.kek(enc["alg"], (kid or DEFAULT_KMS_KEY) if enc["alg"] == "aws:kms" else None)  # usable
        except S3Error as e:
            raise HTTPException(404 if e.code == "KMS.NotFoundException" else 400, e.message) from None
        changes["encryption"] = BucketEncryption(alg=enc["alg"], kms_key=kid)
    await ctx.cluster.namenode.bucket_settings(name, **changes)  # 404 if there is no such bucket
    if lock is not None:
        rule = lock.get("rule")
        await ctx.cluster.namenode.bucket_object_lock(name, ObjectLockConfig(
            rule=None if rule is None else LockRule(mode=rule["mode"], days=rule.get("days"),
                                                    years=rule.get("years"))))
    if logging is not False:
        await ctx.cluster.namenode.bucket_logging(name, None if logging is None else LoggingTarget(
            bucket=logging["target_bucket"], prefix=logging.get("target_prefix", "")))
    if tags is not ...:
        await ctx.cluster.namenode.bucket_tags(name, tags)
    if rules is not ...:
        await ctx.cluster.namenode.bucket_lifecycle(name, Unset() if rules is None else rules)
    ctx.forget_bucket(name)
    return await _one(ctx, name)


# The bucket policy, as PutBucketPolicy takes it. Kept out of the OpenAPI schema: no JSON schema tells a valid policy
# (its resources must name this bucket, its conditions known operators), and the schema's promise is that what it
# admits is accepted.
@router.put("/buckets/{name}/policy", response_model=Bucket, include_in_schema=False)
async def put_policy(name: str, request: Request, _: AdminDep, ctx: CtxDep) -> Bucket:
    """Set the bucket's policy: the body is the policy document (JSON). Invalid: 400, nothing changes."""
    body = await request.body()
    if len(body) > policy.MAX_POLICY_BYTES:
        raise HTTPException(400, f"Policies must be no larger than {policy.MAX_POLICY_BYTES} bytes")
    try:
        text = body.decode("utf-8")
        json.loads(text)
    except ValueError:
        raise HTTPException(400, "the body must be a JSON policy document") from None
    await ctx.cluster.namenode.bucket_settings(name, policy=text)  # MalformedPolicy: 400
    ctx.forget_bucket(name)
    return await _one(ctx, name)


@router.delete("/buckets/{name}/policy", response_model=Bucket, include_in_schema=False)
async def delete_policy(name: str, _: AdminDep, ctx: CtxDep) -> Bucket:
    await ctx.cluster.namenode.bucket_settings(name, policy=Unset())
    ctx.forget_bucket(name)
    return await _one(ctx, name)


@router.get("/kms/keys", tags=["encryption"])
async def kms_keys(_: AdminDep, ctx: CtxDep) -> dict:
    """The KMS key ids SSE-KMS requests and default encryption may name (GW_SSE_KMS_KEYS, aws/s3 and those created
    here), and whether this gateway has a master key (without one only SSE-C works). A key's material is derived
    from the master key and its id, so every gateway with the same master key resolves the same ids."""
    ctx.sse_keys.created_ids = {k.key_id for k in await ctx.cluster.namenode.kms_key_list()}
    return {"keys": sorted(ctx.sse_keys.kms_ids | ctx.sse_keys.created_ids),
            "master_key": ctx.sse_keys.master is not None}


@router.post("/kms/keys", tags=["encryption"], status_code=201,
             responses={400: {"description": "a bad key id (1-256 of A-Z a-z 0-9 _ . : / -, not aws/...)"},
                        409: {"description": "that key id exists (configured or created)"}})
async def create_kms_key(body: KmsKeyCreate, _: AdminDep, ctx: CtxDep) -> dict:
    """Create an SSE-KMS key id: SSE-KMS requests and default encryption may name it at once on this gateway, on
    the others within GW_KMS_REFRESH_S. The NameNode keeps the id only; its material is derived from the master
    key. Keys are never deleted (objects encrypted under one would become unreadable)."""
    if body.key_id.startswith("aws/"):
        raise HTTPException(400, "key ids aws/... are AWS's own (aws/s3: the default key)")
    if ctx.sse_keys.known(body.key_id):
        raise HTTPException(409, f"KMS key {body.key_id!r} exists")
    try:
        rec = await ctx.cluster.namenode.kms_key_create(body.key_id, body.description)
    except errors.AlreadyExists as e:  # made meanwhile through another gateway
        raise HTTPException(409, e.message) from None
    ctx.sse_keys.created_ids.add(rec.key_id)
    return {"key_id": rec.key_id, "description": rec.description, "created": rec.created}
