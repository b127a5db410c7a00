"""Multipart uploads: parts are committed as they arrive; completing concatenates their block lists."""
from __future__ import annotations

from epochfs.common import messages as m, tagging

from .buckets import check_acl
from .services import Services, fields, record


def handlers(s: Services) -> dict:
    meta, settings, repair = s.meta, s.settings, s.repair

    async def mpu_create(req: m.MpuCreate, _) -> m.UploadCreated:
        if req.attrs.acl is not None:
            check_acl(req.attrs.acl)
        attrs = fields(req.attrs)
        tags = tagging.check(req.attrs.tags, tagging.MAX_OBJECT_TAGS)
        if tags:
            attrs["tg"] = tags  # as checked: sorted by key
        return m.UploadCreated(upload_id=meta.create_upload(req.bucket, req.key, attrs))

    async def mpu_get(req: m.MpuGet, _) -> m.UploadRecord:
        return record(meta.get_upload(req.bucket, req.key, req.upload_id), m.UploadRecord)

    async def mpu_put_part(req: m.MpuPutPart, _) -> m.Done:
        part = {k: v for k, v in fields(req.part).items() if k not in ("n", "mt")}
        part["blk"] = s.admit(req.bucket, list(req.blocks))
        meta.put_part(req.bucket, req.key, req.upload_id, req.number, part, fresh=True)
        repair.check_commit(part["blk"])
        return m.Done()

    async def mpu_list_parts(req: m.MpuListParts, _) -> m.Parts:
        up, parts = meta.list_parts(req.bucket, req.key, req.upload_id)
        return m.Parts(upload=record(up, m.UploadRecord), parts=[record(p, m.PartRecord) for p in parts])

    async def mpu_complete(req: m.MpuComplete, _) -> m.Completed:
        res = meta.complete_upload(req.bucket, req.key, req.upload_id, [fields(p) for p in req.parts],
                                   min_part_size=settings.min_part_size, checksum=req.checksum,
                                   if_match=req.if_match, if_none_match=req.if_none_match)
        return record(res, m.Completed)

    async def mpu_abort(req: m.MpuAbort, _) -> m.Done:
        meta.abort_upload(req.bucket, req.key, req.upload_id)
        return m.Done()

    async def mpu_list(req: m.MpuList, _) -> m.Uploads:
        return m.Uploads(uploads=[record(u, m.UploadRecord) for u in meta.list_uploads(req.bucket)])

    return {m.MpuCreate: mpu_create, m.MpuGet: mpu_get, m.MpuPutPart: mpu_put_part,
            m.MpuListParts: mpu_list_parts, m.MpuComplete: mpu_complete, m.MpuAbort: mpu_abort, m.MpuList: mpu_list}
