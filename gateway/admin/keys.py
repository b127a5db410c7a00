"""Access keys: create (the secret is returned once), list, disable, delete, per-bucket permissions.

Keys live on the NameNode; the GW_USERS keys are listed too (source "bootstrap") but can only be changed in the
gateway's settings.
"""
from __future__ import annotations

import hashlib
import secrets

from fastapi import APIRouter, HTTPException, Response

from epochfs.common import errors
from epochfs.common.messages import AccessKeyRecord

from .auth import AdminDep
from .common import BAD_BODY, CtxDep
from .models import Key, KeyCreate, KeyCreated, KeyPatch

router = APIRouter(tags=["keys"])
_404 = {404: {"description": "no such key"}}


def key_view(rec: AccessKeyRecord) -> Key:
    return Key(access_key=rec.access_key, name=rec.name or rec.access_key, owner_id=rec.owner_id, admin=rec.admin,
               disabled=rec.disabled, buckets=rec.buckets, source="admin")


def bootstrap_view(ctx, u) -> Key:
    return Key(access_key=u.access_key, name=u.display_name, owner_id=u.owner_id, admin=ctx.is_admin(u),
               disabled=False, buckets=None, source="bootstrap")


def _not_bootstrap(ctx, access_key: str) -> None:
    if access_key in ctx.keys.bootstrap:
        raise HTTPException(409, "this key comes from the gateway's GW_USERS setting; change it there")


@router.get("/keys", response_model=list[Key])
async def list_keys(_: AdminDep, ctx: CtxDep) -> list[Key]:
    stored = await ctx.cluster.namenode.key_list()
    return [bootstrap_view(ctx, u) for u in ctx.keys.bootstrap.values()] + [key_view(r) for r in stored]


@router.post("/keys", response_model=KeyCreated, status_code=201,
             responses={**BAD_BODY, 409: {"description": "key exists"}})
async def create_key(req: KeyCreate, _: AdminDep, ctx: CtxDep) -> KeyCreated:
    ak = req.access_key or "EPK" + secrets.token_hex(8).upper()
    _not_bootstrap(ctx, ak)
    try:
        rec = await ctx.cluster.namenode.key_create(
            ak, req.secret_key or secrets.token_urlsafe(30),
            owner_id=req.owner_id or hashlib.sha256(ak.encode()).hexdigest(), name=req.name or ak, admin=req.admin,
            buckets=req.buckets)
    except errors.AlreadyExists as e:
        raise HTTPException(409, e.message) from None
    ctx.keys.forget(ak)
    return KeyCreated(**key_view(rec).model_dump(), secret_key=rec.secret_key)


@router.get("/keys/{access_key}", response_model=Key, responses=_404)
async def get_key(access_key: str, _: AdminDep, ctx: CtxDep) -> Key:
    if access_key in ctx.keys.bootstrap:
        return bootstrap_view(ctx, ctx.keys.bootstrap[access_key])
    return key_view(await ctx.cluster.namenode.key_get(access_key))


@router.patch("/keys/{access_key}", response_model=Key,
              responses={**BAD_BODY, **_404, 409: {"description": "bootstrap key"}})
async def patch_key(access_key: str, patch: KeyPatch, _: AdminDep, ctx: CtxDep) -> Key:
    """Disable or enable a key, or replace its bucket permissions; takes effect on every gateway within seconds."""
    _not_bootstrap(ctx, access_key)
    fields = {k: v for k, v in patch.model_dump(exclude_unset=True).items() if v is not None}
    rec = await ctx.cluster.namenode.key_update(access_key, **fields) if fields else \
        await ctx.cluster.namenode.key_get(access_key)
    ctx.keys.forget(access_key)
    return key_view(rec)


@router.delete("/keys/{access_key}", status_code=204, responses={**_404, 409: {"description": "bootstrap key"}})
async def delete_key(access_key: str, _: AdminDep, ctx: CtxDep) -> Response:
    _not_bootstrap(ctx, access_key)
    await ctx.cluster.namenode.key_delete(access_key)
    ctx.keys.forget(access_key)
    return Response(status_code=204)
