"""Object lock (S3's WORM retention): a bucket's lock configuration and default retention, a version's retention
and legal hold, and the one rule every path that removes or rewrites a version asks: `check_unlocked`.

A version is locked while it has a legal hold, or a retention whose date is still ahead. A COMPLIANCE retention
can't be removed, shortened or weakened by anyone until it runs out; a GOVERNANCE one only by a caller that asks to
bypass it (and may: the gateway decides who may). The checks run inside the commands' apply, against the time the
command carries, so every path (an S3 DeleteObject or DeleteObjects, a lifecycle expiration, a mount unlink, rename
or rewrite) honours them, and a replay decides the same.
"""
from __future__ import annotations

import datetime as dt

from epochfs.common import errors

from .. import commands as cmds, keys
from .base import StoreBase
from .records import now_ns

LOCK_MODES = ("GOVERNANCE", "COMPLIANCE")
DAY_MS = 86_400_000
MAX_DAYS = 36_500  # default retention: at most 100 years (AWS's bound)


def lock_reason(rec: dict, t_ns: int, bypass: bool = False) -> str | None:
    """Why version `rec` can't be removed or rewritten at time t_ns, or None."""
    if rec.get("lh"):
        return "it has a legal hold"
    mode, until = rec.get("lkm"), rec.get("lku")
    if mode and until is not None and until > t_ns // 1_000_000:
        if mode == "COMPLIANCE" or not bypass:
            when = dt.datetime.fromtimestamp(until / 1000, dt.timezone.utc).isoformat()
            return f"it is under {mode} retention until {when}"
    return None


def check_rule(rule: dict | None) -> None:
    """A default retention {"m": mode, "d": days | "y": years}: a known mode and exactly one positive period."""
    if rule is None:
        return
    if rule.get("m") not in LOCK_MODES:
        raise errors.InvalidInput(f"unknown object lock mode {rule.get('m')!r}")
    d, y = rule.get("d"), rule.get("y")
    if (d is None) == (y is None):
        raise errors.InvalidInput("a default retention has Days or Years, not both")
    days = d if d is not None else (y or 0) * 365
    if not 0 < days <= MAX_DAYS:
        raise errors.InvalidRetentionPeriod("Default retention period must be a positive integer value (at most "
                                            "100 years)")


def default_until(rule: dict, t_ns: int) -> int:
    days = rule["d"] if rule.get("d") is not None else rule["y"] * 365
    return t_ns // 1_000_000 + days * DAY_MS


class ObjectLock(StoreBase):
    """Bucket lock configuration ("olk" in the bucket record) and version locks ("lkm", "lku", "lh" in a version)."""

    def check_unlocked(self, rec: dict, t_ns: int, bypass: bool = False) -> None:
        reason = lock_reason(rec, t_ns, bypass)
        if reason is not None:
            raise errors.ObjectLocked(f"Access Denied because object protected by object lock: {reason}")

    def check_inode_unlocked(self, ino: int, rec: dict, t_ns: int) -> None:
        """A file the mount would remove, replace or rewrite: neither its current version nor any older one may be
        locked (the mount has no way to bypass a lock)."""
        self.check_unlocked(rec, t_ns)
        for _, v in self._versions(ino):
            self.check_unlocked(v, t_ns)

    def lock_on_commit(self, bucket: str, obj: dict, t_ns: int) -> None:
        """A new version's lock fields: refused in a bucket without object lock; the bucket's default retention
        if the writer chose none."""
        olk = (self.get_inode(self.bucket_ino(bucket)) or {}).get("bkt", {}).get("olk")
        if not olk:
            if obj.get("lkm") or obj.get("lh") is not None:
                raise errors.ObjectLockNotEnabled("Bucket is missing Object Lock Configuration")
            return
        rule = olk.get("r")
        if rule and not obj.get("lkm"):
            obj["lkm"], obj["lku"] = rule["m"], default_until(rule, t_ns)

    # ---------------------------------------------------------------- bucket configuration
    def set_bucket_lock(self, bucket: str, config: dict) -> dict:
        return self.execute(cmds.SetBucketLock(bucket=bucket, config=config))

    def _apply_set_bucket_lock(self, b, c: cmds.SetBucketLock) -> dict:
        if not c.config.get("on", True):
            raise errors.InvalidInput("object lock can't be disabled")
        check_rule(c.config.get("r"))
        ino = self.bucket_ino(c.bucket)
        rec = self.get_inode(ino)
        bkt = rec.get("bkt", {})
        if not bkt.get("olk") and bkt.get("ver") != "Enabled":
            raise errors.InvalidBucketState("Versioning must be 'Enabled' on the bucket to apply a Object Lock "
                                            "configuration")
        olk = {"on": True}
        if c.config.get("r"):
            olk["r"] = {k: v for k, v in c.config["r"].items() if v is not None}
        rec["bkt"] = {**bkt, "olk": olk, "ver": "Enabled"}
        b.put(keys.inode(ino), self._enc(rec))
        return {"name": c.bucket, **rec["bkt"]}

    # ---------------------------------------------------------------- a version's retention and legal hold
    def lock_object(self, bucket: str, key: str, version_id: str | None, *, retention: bool = False,
                    mode: str | None = None, until: int | None = None, legal_hold: bool | None = None,
                    bypass: bool = False) -> dict:
        return self.execute(cmds.LockObject(bucket=bucket, key=key, version_id=version_id, retention=retention,
                                            mode=mode, until=until, legal_hold=legal_hold, bypass=bypass,
                                            t=now_ns()))

    def _apply_lock_object(self, b, c: cmds.LockObject) -> dict:
        if not (self.get_inode(self.bucket_ino(c.bucket)) or {}).get("bkt", {}).get("olk"):
            raise errors.ObjectLockNotEnabled("Bucket is missing Object Lock Configuration")
        parent, name, marker = self._resolve(c.bucket, c.key)
        ino = None if marker else self._lookup(parent, name, False)
        if ino is None:
            if c.version_id is not None:
                raise errors.NoSuchVersion("The specified version does not exist.", key=c.key,
                                           version_id=c.version_id)
            raise errors.NoSuchKey("The specified key does not exist.", key=c.key)
        cur = self.get_inode(ino) or {}
        target, vkey = cur, None
        if c.version_id is not None and c.version_id != cur.get("vid", "null"):
            found = self._find_version(ino, c.version_id)
            if found is None:
                raise errors.NoSuchVersion("The specified version does not exist.", key=c.key,
                                           version_id=c.version_id)
            vkey, target = found
        if target.get("dm"):
            raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")
        now_ms = c.t // 1_000_000
        if c.retention:
            if c.mode is not None:
                if c.mode not in LOCK_MODES:
                    raise errors.InvalidInput(f"unknown object lock mode {c.mode!r}")
                if c.until is None or c.until <= now_ms:
                    raise errors.InvalidInput("The retain until date must be in the future!",
                                              argument="RetainUntilDate")
            old_mode, old_until = target.get("lkm"), target.get("lku")
            if old_mode and old_until is not None and old_until > now_ms:
                weaker = c.mode is None or c.mode != old_mode or c.until < old_until
                if weaker and (old_mode == "COMPLIANCE" or not c.bypass):
                    raise errors.ObjectLocked(f"Access Denied: the version is under {old_mode} retention, which "
                                              "this change would shorten or remove")
            if c.mode is None:
                target.pop("lkm", None)
                target.pop("lku", None)
            else:
                target["lkm"], target["lku"] = c.mode, c.until
        if c.legal_hold is not None:
            target["lh"] = c.legal_hold
        if vkey is not None:
            b.put(vkey, self._enc(target))
        else:
            self._put_file(b, parent, name, ino, {k: v for k, v in target.items() if k != "ino"})
        return {**target, "ino": ino}
