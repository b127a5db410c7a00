"""Access keys and SSE-KMS key ids made through the admin API (namenode/access_keys.py keeps them)."""
from __future__ import annotations

from epochfs.common import messages as m

from .services import Services, record


def handlers(s: Services) -> dict:
    store = s.access_keys

    async def key_create(req: m.KeyCreate, _) -> m.AccessKeyRecord:
        return record(store.create({"access_key": req.access_key, "secret_key": req.secret_key,
                                    "owner_id": req.owner_id, "name": req.name, "admin": req.admin,
                                    "buckets": req.buckets}), m.AccessKeyRecord)

    async def key_get(req: m.KeyGet, _) -> m.AccessKeyRecord:
        return record(store.get(req.access_key), m.AccessKeyRecord)

    async def key_list(req: m.KeyList, _) -> m.AccessKeys:
        return m.AccessKeys(keys=[record(r, m.AccessKeyRecord) for r in store.list()])

    async def key_update(req: m.KeyUpdate, _) -> m.AccessKeyRecord:
        fields = {f: getattr(req, f) for f in ("name", "owner_id", "admin", "disabled", "buckets")
                  if getattr(req, f) is not None}
        return record(store.update(req.access_key, fields), m.AccessKeyRecord)

    async def key_delete(req: m.KeyDelete, _) -> m.Done:
        store.delete(req.access_key)
        return m.Done()

    async def kms_key_create(req: m.KmsKeyCreate, _) -> m.KmsKeyRecord:
        return record(store.create_kms_key(req.key_id, req.description), m.KmsKeyRecord)

    async def kms_key_list(req: m.KmsKeyList, _) -> m.KmsKeys:
        return m.KmsKeys(keys=[record(r, m.KmsKeyRecord) for r in store.kms_keys()])

    return {m.KeyCreate: key_create, m.KeyGet: key_get, m.KeyList: key_list, m.KeyUpdate: key_update,
            m.KeyDelete: key_delete, m.KmsKeyCreate: kms_key_create, m.KmsKeyList: kms_key_list}
