"""S3 access keys created through the gateway's admin API, kept in the NameNode's RocksDB so that every gateway sees
the same keys (gateways cache them for a few seconds).

A record holds the secret (SigV4 needs it to verify signatures), the canonical owner id the key acts as, a display
name, whether it is an admin key, whether it is disabled, and per-bucket permissions {bucket: "read"|"write"|"owner"}.
The bootstrap users of GW_USERS are not stored here.
"""
from __future__ import annotations

import re
import time

import orjson

from epochfs.common import errors
from epochfs.common.kv import KV, prefix_end

from . import commands as cmds, keys

PERMISSIONS = ("read", "write", "owner")
_ACCESS_KEY = re.compile(r"^[A-Za-z0-9_.+=-]{3,128}$")
_KMS_KEY_ID = re.compile(r"^[A-Za-z0-9_.:/-]{1,256}$")
_FIELDS = {"secret_key", "owner_id", "name", "admin", "disabled", "buckets"}


def check_buckets(perms) -> dict:
    if not isinstance(perms, dict) or not all(isinstance(b, str) and b and p in PERMISSIONS for b, p in perms.items()):
        raise errors.InvalidInput(f"bucket permissions must map bucket names to one of {', '.join(PERMISSIONS)}")
    return dict(perms)


def _get(kv: KV, access_key: str) -> dict:
    raw = kv.get(keys.access_key(access_key))
    if raw is None:
        raise errors.NotFound(f"no access key {access_key!r}")
    return {"access_key": access_key, **orjson.loads(raw)}


# The commands' effects, applied by MetaStore.execute.
def apply_create(kv: KV, b, c: cmds.CreateAccessKey) -> dict:
    if kv.get(keys.access_key(c.access_key)) is not None:
        raise errors.AlreadyExists(f"access key {c.access_key!r} exists")
    b.put(keys.access_key(c.access_key), orjson.dumps(c.rec))
    return {"access_key": c.access_key, **c.rec}


def apply_update(kv: KV, b, c: cmds.UpdateAccessKey) -> dict:
    rec = _get(kv, c.access_key)
    bad = set(c.fields) - (_FIELDS - {"secret_key"})
    if bad:
        raise errors.InvalidInput(f"cannot change {', '.join(sorted(bad))}")
    rec.update(c.fields)
    if "buckets" in c.fields:
        rec["buckets"] = check_buckets(c.fields["buckets"])
    b.put(keys.access_key(c.access_key), orjson.dumps({k: v for k, v in rec.items() if k != "access_key"}))
    return rec


def apply_delete(kv: KV, b, c: cmds.DeleteAccessKey) -> None:
    _get(kv, c.access_key)
    b.delete(keys.access_key(c.access_key))


def apply_create_kms_key(kv: KV, b, c: cmds.CreateKmsKey) -> dict:
    if kv.get(keys.kms_key(c.key_id)) is not None:
        raise errors.AlreadyExists(f"KMS key {c.key_id!r} exists")
    b.put(keys.kms_key(c.key_id), orjson.dumps(c.rec))
    return {"key_id": c.key_id, **c.rec}


class AccessKeys:
    def __init__(self, meta) -> None:
        """`meta`: the MetaStore, whose commands change the keys (a MetaStore's `kv` is read directly)."""
        self.meta = meta
        self.kv = meta.kv

    def get(self, access_key: str) -> dict:
        return _get(self.kv, access_key)

    def create(self, rec: dict) -> dict:
        ak = rec.get("access_key", "")
        if not isinstance(ak, str) or not _ACCESS_KEY.match(ak):
            raise errors.InvalidInput("an access key is 3-128 letters, digits or _.+=-")
        if not isinstance(rec.get("secret_key"), str) or len(rec["secret_key"]) < 8:
            raise errors.InvalidInput("a secret key has at least 8 characters")
        body = {"secret_key": rec["secret_key"], "owner_id": str(rec.get("owner_id") or ""),
                "name": str(rec.get("name") or ak), "admin": bool(rec.get("admin")), "disabled": False,
                "buckets": check_buckets(rec.get("buckets") or {}), "created": time.time_ns()}
        return self.meta.execute(cmds.CreateAccessKey(access_key=ak, rec=body))

    def update(self, access_key: str, fields: dict) -> dict:
        if not isinstance(fields, dict):
            raise errors.InvalidInput("fields must be an object")
        return self.meta.execute(cmds.UpdateAccessKey(access_key=access_key, fields=fields))

    def delete(self, access_key: str) -> None:
        self.meta.execute(cmds.DeleteAccessKey(access_key=access_key))

    def list(self) -> list[dict]:
        """Every key, without its secret."""
        p = keys.ACCESS_KEYS
        out = []
        for k, v in self.kv.scan(p, prefix_end(p)):
            rec = orjson.loads(v)
            rec.pop("secret_key", None)
            out.append({"access_key": k[1:].decode(), **rec})
        return out

    # ------------------------------------------------ SSE-KMS key ids (the gateways derive their material)
    def create_kms_key(self, key_id: str, description: str) -> dict:
        if not isinstance(key_id, str) or not _KMS_KEY_ID.match(key_id) or key_id.startswith("aws/"):
            raise errors.InvalidInput("a KMS key id is 1-256 letters, digits or _.:/-, not starting with aws/")
        if len(description) > 1024:
            raise errors.InvalidInput("a KMS key description is at most 1024 characters")
        return self.meta.execute(cmds.CreateKmsKey(key_id=key_id, rec={"description": description,
                                                                       "created": time.time_ns()}))

    def kms_keys(self) -> list[dict]:
        p = keys.KMS_KEYS
        return [{"key_id": k[1:].decode(), **orjson.loads(v)} for k, v in self.kv.scan(p, prefix_end(p))]

    def forget_bucket(self, bucket: str) -> None:
        """A deleted bucket's name may be taken by someone else: grants on it go with it."""
        for rec in self.list():
            if bucket in rec["buckets"]:
                self.update(rec["access_key"], {"buckets": {b: p for b, p in rec["buckets"].items() if b != bucket}})

