"""Object lock: a bucket's configuration (PutObjectLockConfiguration) and a version's retention and legal hold
(PutObjectRetention, PutObjectLegalHold). The rules themselves live in namenode/meta/lock.py, applied inside the
commands, so deletes, the mount and lifecycle honour them too."""
from __future__ import annotations

from epochfs.common import messages as m

from .services import Services, fields, record


def handlers(s: Services) -> dict:
    meta = s.meta

    async def bucket_object_lock(req: m.BucketObjectLock, _) -> m.BucketRecord:
        return record(meta.set_bucket_lock(req.bucket, fields(req.config)), m.BucketRecord)

    async def object_lock_set(req: m.ObjectLockSet, _) -> m.ObjectRecord:
        rec = meta.lock_object(req.bucket, req.key, req.version_id, retention=req.retention, mode=req.mode,
                               until=req.until, legal_hold=req.legal_hold, bypass=req.bypass)
        return record({k: v for k, v in rec.items() if k != "blk"}, m.ObjectRecord)

    return {m.BucketObjectLock: bucket_object_lock, m.ObjectLockSet: object_lock_set}
