"""Buckets: usage, object count, replication factor, write policy and quota; PATCH changes the last three."""
from __future__ import annotations

from fastapi import APIRouter

from .auth import AdminDep
from .common import BAD_BODY, CtxDep
from .models import Bucket, BucketPatch

router = APIRouter(tags=["buckets"])
# admin field -> bucket record field on the NameNode
_FIELDS = {"replication": "rf", "write_policy": "wp", "quota_bytes": "qb", "quota_objects": "qo"}
_CLEARABLE = ("quota_bytes", "quota_objects")


def bucket_view(b: dict, usage: list[int]) -> Bucket:
    return Bucket(name=b["name"], owner=b.get("owner", ""), created=int(b.get("created", 0)), bytes=usage[0],
                  objects=usage[1], replication=int(b.get("rf") or 0), block_size=int(b.get("bs") or 0),
                  write_policy=b.get("wp") or "async", quota_bytes=b.get("qb"), quota_objects=b.get("qo"),
                  versioning=b.get("ver"))


@router.get("/buckets", response_model=list[Bucket])
async def list_buckets(_: AdminDep, ctx: CtxDep) -> list[Bucket]:
    buckets = (await ctx.cluster.nn("bucket_list"))["buckets"]
    usage = (await ctx.cluster.nn("bucket_usage"))["usage"]
    return [bucket_view(b, usage.get(b["name"], [0, 0])) for b in buckets]


async def _one(ctx, name: str) -> Bucket:
    info = await ctx.cluster.nn("bucket_info", bucket=name)
    usage = (await ctx.cluster.nn("bucket_usage", bucket=name))["usage"][name]
    return bucket_view(info, usage)


@router.get("/buckets/{name}", response_model=Bucket, responses={404: {"description": "no such bucket"}})
async def get_bucket(name: str, _: AdminDep, ctx: CtxDep) -> Bucket:
    return await _one(ctx, name)


@router.patch("/buckets/{name}", response_model=Bucket,
              responses={**BAD_BODY, 404: {"description": "no such bucket"}})
async def patch_bucket(name: str, patch: BucketPatch, _: AdminDep, ctx: CtxDep) -> Bucket:
    """Change replication factor (new blocks), write policy or quotas. A quota set to null is removed."""
    await ctx.cluster.nn("bucket_info", bucket=name)  # 404 before anything changes
    fields = {_FIELDS[k]: v for k, v in patch.model_dump(exclude_unset=True).items()
              if v is not None or k in _CLEARABLE}
    if fields:
        await ctx.cluster.nn("bucket_update", bucket=name, fields=fields)
        ctx.forget_bucket(name)
    return await _one(ctx, name)
