"""Buckets: create, delete, settings, listing and usage. A bucket's record ("bkt" in its directory inode) changes only
through these, each setting validated here."""
from __future__ import annotations

from epochfs.common import defaults, errors, lifecycle, policy, tagging, write_policy
from epochfs.common import messages as m

from .services import Services, fields, record

MAX_REPLICATION = defaults.MAX_REPLICATION
OWNERSHIP = ("BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter")
VERSIONING = ("Enabled", "Suspended")
ENCRYPTION = ("AES256", "aws:kms")  # a bucket's default server-side encryption
CANNED_ACLS = ("private", "public-read", "public-read-write", "authenticated-read")
ACL_PERMISSIONS = ("READ", "WRITE", "READ_ACP", "WRITE_ACP", "FULL_CONTROL")


def check_acl(acl) -> None:
    """A stored ACL: a canned name, or grants [grantee ("id:..." or "uri:..."), permission]."""
    if isinstance(acl, str):
        if acl not in CANNED_ACLS:
            raise errors.InvalidInput(f"unknown canned ACL {acl!r}")
        return
    for grantee, perm in acl:
        if not grantee.startswith(("id:", "uri:")) or perm not in ACL_PERMISSIONS:
            raise errors.InvalidInput(f"invalid grant {grantee!r} {perm!r}")


def _one_of(value: str, allowed: tuple, what: str) -> str:
    if value not in allowed:
        raise errors.InvalidInput(f"invalid {what} {value!r}: one of {', '.join(allowed)}")
    return value


def _count(value: int, what: str, lo: int = 0, hi: int = 2 ** 63 - 1) -> int:
    if not lo <= value <= hi:
        raise errors.InvalidInput(f"{what} must be between {lo} and {hi}")
    return value


def _public_acl(acl) -> bool:
    return acl in ("public-read", "public-read-write", "authenticated-read") or not isinstance(acl, str) and any(
        g.startswith("uri:") and g.endswith(("/AllUsers", "/AuthenticatedUsers")) for g, _ in acl)


def changes(req: m.BucketSettings, current: m.BucketRecord | None = None) -> dict:
    """The stored fields a settings change writes (None removes one), each validated: all or nothing."""
    out: dict = {}
    if req.block_size is not None:  # new writes are cut into blocks of this size; existing objects keep theirs
        out["bs"] = defaults.check_block_size(req.block_size)
    if req.replication is not None:
        out["rf"] = _count(req.replication, "replication", 1, MAX_REPLICATION)
    if req.write_policy is not None:
        out["wp"] = write_policy.validate(req.write_policy)
    for name, short in (("quota_bytes", "qb"), ("quota_objects", "qo")):
        v = getattr(req, name)
        if v is not None:
            out[short] = None if isinstance(v, m.Unset) else _count(v, name)
    if req.versioning is not None:
        out["ver"] = _one_of(req.versioning, VERSIONING, "versioning status")
    if req.acl is not None:
        check_acl(req.acl)
        out["acl"] = req.acl
    if req.ownership is not None:
        out["own"] = None if isinstance(req.ownership, m.Unset) else _one_of(req.ownership, OWNERSHIP,
                                                                             "object ownership")
    if req.cors is not None:
        out["cors"] = None if isinstance(req.cors, m.Unset) else fields(req.cors)
    if req.public_access_block is not None and req.remove_public_access_block:
        raise errors.InvalidInput("set or remove the public access block, not both")
    if req.public_access_block is not None:
        out["pab"] = fields(req.public_access_block)
    if req.remove_public_access_block:
        out["pab"] = None
    pab = req.public_access_block if req.public_access_block is not None else \
        None if req.remove_public_access_block else current.public_access_block if current else None
    if req.policy is not None:
        if isinstance(req.policy, m.Unset):
            out["pol"] = None
        else:
            parsed = policy.parse(req.policy, req.bucket)  # MalformedPolicy: nothing changes
            if pab is not None and pab.block_public_policy and policy.is_public(parsed):
                raise errors.PermissionDenied("the bucket's public access block forbids a public policy")
            out["pol"] = req.policy
    if req.acl is not None and pab is not None and pab.block_public_acls and _public_acl(req.acl):
        raise errors.PermissionDenied("the bucket's public access block forbids a public ACL")
    if req.encryption is not None and req.no_encryption:
        raise errors.InvalidInput("set or remove the default encryption, not both")
    if req.encryption is not None:
        _one_of(req.encryption.alg, ENCRYPTION, "default encryption")
        if req.encryption.alg != "aws:kms" and req.encryption.kms_key is not None:
            raise errors.InvalidInput("a KMS key id goes only with aws:kms encryption")
        out["enc"] = fields(req.encryption)
    elif req.no_encryption:
        out["enc"] = None
    return out


LOG_KEY_FORMATS = ("simple", "partitioned:EventTime", "partitioned:DeliveryTime")


def _logging(t: m.LoggingTarget) -> dict:
    """A logging target as stored (the gateway checked the target bucket and the caller's rights on it)."""
    _one_of(t.key_format, LOG_KEY_FORMATS, "log object key format")
    if len(t.prefix.encode()) > 512 or len(t.grants) > 100:
        raise errors.InvalidInput("logging TargetPrefix is at most 512 bytes, with at most 100 grants")
    for grantee, perm in t.grants:
        if not grantee.startswith(("id:", "uri:", "email:")) or perm not in ("READ", "WRITE", "FULL_CONTROL"):
            raise errors.InvalidInput(f"invalid logging grant {grantee!r} {perm!r}")
    return fields(t)


def handlers(s: Services) -> dict:
    meta, settings = s.meta, s.settings

    async def bucket_create(req: m.BucketCreate, _) -> m.BucketRecord:
        check_acl(req.acl)
        rec = {"bs": defaults.check_block_size(req.block_size or settings.block_size),
               "rf": _count(req.replication or settings.replication, "replication", 1, MAX_REPLICATION),
               "acl": req.acl, "loc": req.location}
        if req.write_policy:
            rec["wp"] = write_policy.validate(req.write_policy)
        if req.ownership:
            rec["own"] = _one_of(req.ownership, OWNERSHIP, "object ownership")
        if req.object_lock:  # versioning on, for good (it can't be suspended while "olk" is set)
            rec["ver"], rec["olk"] = "Enabled", {"on": True}
        return record(meta.create_bucket(req.bucket, req.owner, rec), m.BucketRecord)

    async def bucket_delete(req: m.BucketDelete, _) -> m.Done:
        meta.delete_bucket(req.bucket)
        s.access_keys.forget_bucket(req.bucket)
        return m.Done()

    async def bucket_info(req: m.BucketInfo, _) -> m.BucketRecord:
        return record(meta.bucket_info(req.bucket), m.BucketRecord)

    async def bucket_list(req: m.BucketList, _) -> m.Buckets:
        return m.Buckets(buckets=[record(b, m.BucketRecord) for b in meta.list_buckets()])

    async def bucket_settings(req: m.BucketSettings, _) -> m.BucketRecord:
        new = changes(req, record(meta.bucket_info(req.bucket), m.BucketRecord))
        return record(meta.update_bucket(req.bucket, new) if new else meta.bucket_info(req.bucket),
                      m.BucketRecord)

    async def bucket_logging(req: m.BucketLogging, _) -> m.BucketRecord:
        new = {"lgt": None if req.target is None else _logging(req.target)}
        return record(meta.update_bucket(req.bucket, new), m.BucketRecord)

    async def bucket_tags(req: m.BucketTags, _) -> m.BucketRecord:
        tags = None if req.tags is None else tagging.check(req.tags, tagging.MAX_BUCKET_TAGS)
        return record(meta.set_bucket_tags(req.bucket, tags), m.BucketRecord)

    async def bucket_lifecycle(req: m.BucketLifecycle, _) -> m.BucketRecord:
        rules = None if isinstance(req.rules, m.Unset) else lifecycle.check(req.rules)
        return record(meta.set_bucket_lifecycle(req.bucket, rules), m.BucketRecord)

    async def bucket_usage(req: m.BucketUsage, _) -> m.Usage:
        if req.bucket:
            return m.Usage(usage={req.bucket: m.BucketUsed(*meta.usage(meta.bucket_ino(req.bucket)))})
        return m.Usage(usage={b: m.BucketUsed(*u) for b, u in meta.bucket_usage().items()})

    return {m.BucketCreate: bucket_create, m.BucketDelete: bucket_delete, m.BucketInfo: bucket_info,
            m.BucketList: bucket_list, m.BucketSettings: bucket_settings, m.BucketUsage: bucket_usage,
            m.BucketLogging: bucket_logging, m.BucketTags: bucket_tags, m.BucketLifecycle: bucket_lifecycle}
