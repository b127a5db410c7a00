"""Bucket operations: ListBuckets, CreateBucket, DeleteBucket, HeadBucket, GetBucketLocation, ACL and versioning."""
from __future__ import annotations

import ipaddress
import re

from epochfs.common import errors

from . import xml
from .body import read_all
from .errors import S3Error, access_denied, not_implemented

_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def validate_bucket_name(name: str) -> None:
    bad = (not _NAME.match(name) or ".." in name or ".-" in name or "-." in name
           or name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3")))
    if not bad:
        try:
            ipaddress.IPv4Address(name)
            bad = True
        except ValueError:
            pass
    if bad:
        raise S3Error("InvalidBucketName", "The specified bucket is not valid.", 400, BucketName=name)


async def bucket_owned(ctx, req) -> dict:
    """The bucket's record, after checking the caller may use it (owner or admin)."""
    info = await ctx.bucket(req.bucket)
    if info.get("owner") != req.user.owner_id and not ctx.is_admin(req.user):
        raise access_denied()
    return info


async def list_buckets(ctx, req):
    from .router import Response
    res = await ctx.cluster.nn("bucket_list")
    mine = [b for b in res["buckets"] if b.get("owner") == req.user.owner_id]
    prefix = req.query.get("prefix")
    if prefix:
        mine = [b for b in mine if b["name"].startswith(prefix)]
    start = req.query.get("continuation-token", "")
    mine = [b for b in mine if b["name"] > start]
    try:
        max_buckets = int(req.query.get("max-buckets", "10000"))
    except ValueError:
        raise S3Error("InvalidArgument", "max-buckets must be an integer", 400) from None
    if not 1 <= max_buckets <= 10000:
        raise S3Error("InvalidArgument", "max-buckets must be between 1 and 10000", 400)
    page, more = mine[:max_buckets], len(mine) > max_buckets
    items = "".join(f"<Bucket><Name>{xml.esc(b['name'])}</Name><CreationDate>{xml.iso8601(b['created'])}"
                    f"</CreationDate><BucketRegion>{ctx.settings.region}</BucketRegion></Bucket>" for b in page)
    extra = ""
    if more:
        extra += f"<ContinuationToken>{xml.esc(page[-1]['name'])}</ContinuationToken>"
    if prefix:
        extra += f"<Prefix>{xml.esc(prefix)}</Prefix>"
    body = xml.doc("ListAllMyBucketsResult",
                   f"{xml.owner(req.user.owner_id, req.user.display_name)}<Buckets>{items}</Buckets>{extra}")
    return Response(200, [("content-type", "application/xml")], body)


async def create_bucket(ctx, req):
    from .router import Response
    validate_bucket_name(req.bucket)
    body = await read_all(req.receive, 1 << 20)
    if body.strip():
        root = xml.parse(body)
        loc = root.findtext("LocationConstraint")
        if loc and loc not in (ctx.settings.region,) and not (loc == "" or ctx.settings.region == "us-east-1"
                                                                and loc in ("us-east-1", "EU")):
            raise S3Error("InvalidLocationConstraint", "The specified location-constraint is not valid", 400)
    acl = req.headers.get("x-amz-acl", "private")
    if acl not in ("private", "public-read", "public-read-write", "authenticated-read"):
        raise S3Error("InvalidArgument", f"unknown canned ACL {acl}", 400)
    try:
        await ctx.cluster.nn("bucket_create", bucket=req.bucket, owner=req.user.owner_id)
    except errors.BucketAlreadyOwnedByYou:
        if ctx.settings.region == "us-east-1":
            return Response(200, [("location", f"/{req.bucket}")])  # us-east-1 answers 200 to a repeat create
        raise
    ctx.forget_bucket(req.bucket)
    return Response(200, [("location", f"/{req.bucket}")])


async def delete_bucket(ctx, req):
    from .router import Response
    await bucket_owned(ctx, req)
    await ctx.cluster.nn("bucket_delete", bucket=req.bucket)
    ctx.forget_bucket(req.bucket)
    return Response(204)


async def head_bucket(ctx, req):
    from .router import Response
    await bucket_owned(ctx, req)
    return Response(200, [("x-amz-bucket-region", ctx.settings.region)])


async def get_location(ctx, req):
    from .router import Response
    await bucket_owned(ctx, req)
    region = "" if ctx.settings.region == "us-east-1" else ctx.settings.region
    return Response(200, [("content-type", "application/xml")],
                    f'{xml.HEAD}<LocationConstraint xmlns="{xml.NS}">{region}</LocationConstraint>'.encode())


async def get_versioning(ctx, req):
    from .router import Response
    await bucket_owned(ctx, req)
    return Response(200, [("content-type", "application/xml")], xml.doc("VersioningConfiguration", ""))


def acl_xml(owner_id: str, display: str) -> bytes:
    grant = (f'<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser">'
             f"<ID>{xml.esc(owner_id)}</ID><DisplayName>{xml.esc(display)}</DisplayName></Grantee>"
             f"<Permission>FULL_CONTROL</Permission></Grant>")
    return xml.doc("AccessControlPolicy", f"{xml.owner(owner_id, display)}<AccessControlList>{grant}"
                                          f"</AccessControlList>")


async def get_acl(ctx, req):
    from .router import Response
    await bucket_owned(ctx, req)
    return Response(200, [("content-type", "application/xml")], acl_xml(req.user.owner_id, req.user.display_name))


async def put_acl(ctx, req):
    """Only the private canned ACL exists here: access is decided by ownership (and, later, admin-granted keys)."""
    from .router import Response
    await bucket_owned(ctx, req)
    await read_all(req.receive, 1 << 20)
    if req.headers.get("x-amz-acl", "private") != "private":
        raise not_implemented("ACLs other than private")
    return Response(200)
