"""Bucket operations: ListBuckets, CreateBucket, DeleteBucket, HeadBucket, GetBucketLocation, ACL, versioning and
object ownership."""
from __future__ import annotations

import ipaddress
import re

from epochfs.common import defaults, errors, policy
from epochfs.common.messages import BucketRecord, PublicAccessBlock, Unset

from . import args, xml
from .body import read_all
from .access import (OWNERSHIP, acl_from_xml, acl_not_supported, acl_xml, acls_disabled, bucket_access, canned_acl,
                     check_ownership, effective_acl, is_public_acl, key_allows)
from .errors import S3Error, malformed_xml
from .http import Response

WRITE_POLICY_HEADER = "x-epochfs-write-policy"
BLOCK_SIZE_HEADER = "x-epochfs-block-size"
_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def validate_bucket_name(name: str) -> None:
    """S3's rules for bucket names; a name that breaks one is InvalidBucketName, saying which."""
    why = ""
    if not 3 <= len(name) <= 63:
        why = f"{len(name)} characters: a bucket name has 3 to 63"
    elif not _NAME.match(name):
        why = "lowercase letters, digits, dots and hyphens only, beginning and ending with a letter or digit"
    elif ".." in name or ".-" in name or "-." in name:
        why = "no dot next to a dot or a hyphen"
    elif name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3")):
        why = "a prefix or suffix S3 reserves"
    else:
        try:
            ipaddress.IPv4Address(name)
            why = "not an IP address"
        except ValueError:
            pass
    if why:
        raise errors.InvalidBucketName(f"The specified bucket is not valid ({why}).", bucket_name=name)


async def bucket_owned(ctx, req) -> BucketRecord:
    """The bucket's record, after checking the caller owns it (or is an admin)."""
    return await bucket_access(ctx, req)


async def list_buckets(ctx, req):
    buckets = await ctx.cluster.namenode.bucket_list() if req.auth is not None else []
    mine = [b for b in buckets if b.owner == req.user.owner_id or key_allows(req.user, b.name, "read")]
    prefix = req.query.get("prefix")
    if prefix:
        mine = [b for b in mine if b.name.startswith(prefix)]
    start = req.query.get("continuation-token", "")
    mine = [b for b in mine if b.name > start]
    max_buckets = args.int_arg(req.query.get("max-buckets"), "max-buckets", 10000, 1, 10000,
                               "max-buckets must be an integer between 1 and 10000")
    page, more = mine[:max_buckets], len(mine) > max_buckets
    items = "".join(f"<Bucket><Name>{xml.esc(b.name)}</Name><CreationDate>{xml.iso8601(b.created)}"
                    f"</CreationDate><BucketRegion>{ctx.settings.region}</BucketRegion></Bucket>" for b in page)
    extra = ""
    if more:
        extra += f"<ContinuationToken>{xml.esc(page[-1].name)}</ContinuationToken>"
    if prefix:
        extra += f"<Prefix>{xml.esc(prefix)}</Prefix>"
    body = xml.doc("ListAllMyBucketsResult",
                   f"{xml.owner(req.user.owner_id, req.user.display_name)}<Buckets>{items}</Buckets>{extra}")
    return Response(200, [("content-type", "application/xml")], body)


async def create_bucket(ctx, req):
    if req.auth is None:
        raise errors.PermissionDenied("Access Denied")
    validate_bucket_name(req.bucket)
    body = await read_all(req.receive, 1 << 20)
    loc = ""
    if body.strip():
        root = xml.parse(body)
        loc = (root.findtext("LocationConstraint") or "").strip()
    acl = await canned_acl(ctx, req)
    own = req.headers.get("x-amz-object-ownership")
    if own is not None:
        check_ownership(own, acl, req.user.owner_id)
    policy = req.headers.get(WRITE_POLICY_HEADER)  # epochfs's own: async or sync:N (default: the cluster's)
    bs = req.headers.get(BLOCK_SIZE_HEADER)  # epochfs's own: bytes (default: the cluster's, NN_BLOCK_SIZE)
    if bs is not None:
        bs = defaults.parse_block_size(bs)  # InvalidInput: 400 InvalidArgument, nothing created
    lock = req.headers.get("x-amz-bucket-object-lock-enabled", "").strip().lower()
    if lock not in ("", "true", "false"):
        raise errors.InvalidInput("x-amz-bucket-object-lock-enabled must be true or false",
                                  argument="x-amz-bucket-object-lock-enabled")
    try:
        await ctx.cluster.namenode.bucket_create(req.bucket, owner=req.user.owner_id, acl=acl, location=loc,
                                                 write_policy=policy.strip() if policy else None, ownership=own or None,
                                                 block_size=bs, object_lock=lock == "true")
    except errors.BucketAlreadyOwnedByYou:
        if ctx.settings.region == "us-east-1":
            return Response(200, [("location", f"/{req.bucket}")])  # us-east-1 answers 200 to a repeat create
        raise
    ctx.forget_bucket(req.bucket)
    return Response(200, [("location", f"/{req.bucket}")])


async def delete_bucket(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_delete(req.bucket)
    ctx.forget_bucket(req.bucket)
    return Response(204)


async def head_bucket(ctx, req):
    await bucket_access(ctx, req, "read")  # whoever may list the bucket may ask whether it exists
    return Response(200, [("x-amz-bucket-region", ctx.settings.region)])


async def get_location(ctx, req):
    info = await bucket_owned(ctx, req)
    region = info.location or ("" if ctx.settings.region == "us-east-1" else ctx.settings.region)
    return Response(200, [("content-type", "application/xml")],
                    f'{xml.HEAD}<LocationConstraint xmlns="{xml.NS}">{region}</LocationConstraint>'.encode())


async def get_versioning(ctx, req):
    info = await bucket_owned(ctx, req)
    status = f"<Status>{info.versioning}</Status>" if info.versioning else ""
    return Response(200, [("content-type", "application/xml")], xml.doc("VersioningConfiguration", status))


async def put_versioning(ctx, req):
    await bucket_owned(ctx, req)
    root = xml.parse(await read_all(req.receive, 64 << 10))
    status = root.findtext("Status")
    if root.tag != "VersioningConfiguration" or status not in ("Enabled", "Suspended", None):
        raise malformed_xml()
    if status is not None:
        await ctx.cluster.namenode.bucket_settings(req.bucket, versioning=status)
        ctx.forget_bucket(req.bucket)
    return Response(200)


async def get_acl(ctx, req):
    info = await bucket_access(ctx, req, "read_acp")
    owner = info.owner
    return Response(200, [("content-type", "application/xml")],
                    acl_xml(info.acl, owner, ctx.display_name(owner), ctx.display_name))


async def put_acl(ctx, req):
    info = await bucket_access(ctx, req, "write_acp")
    if acls_disabled(info):
        raise acl_not_supported()
    body = await read_all(req.receive, 1 << 20)
    acl = await acl_from_xml(ctx, body, info.owner) if body.strip() else await canned_acl(ctx, req)
    await ctx.cluster.namenode.bucket_settings(req.bucket, acl=acl)
    ctx.forget_bucket(req.bucket)
    return Response(200)


async def get_ownership(ctx, req):
    info = await bucket_owned(ctx, req)
    if not info.ownership:
        raise S3Error("OwnershipControlsNotFoundError", "The bucket ownership controls were not found", 404,
                      BucketName=req.bucket)
    return Response(200, [("content-type", "application/xml")],
                    xml.doc("OwnershipControls", f"<Rule><ObjectOwnership>{info.ownership}</ObjectOwnership></Rule>"))


async def put_ownership(ctx, req):
    info = await bucket_owned(ctx, req)
    root = xml.parse(await read_all(req.receive, 64 << 10))
    rules = [r.findtext("ObjectOwnership") for r in root.iter("Rule")]
    if root.tag != "OwnershipControls" or len(rules) != 1 or rules[0] not in OWNERSHIP:
        raise malformed_xml()
    check_ownership(rules[0], info.acl, info.owner)
    await ctx.cluster.namenode.bucket_settings(req.bucket, ownership=rules[0])
    ctx.forget_bucket(req.bucket)
    return Response(200)


async def delete_ownership(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_settings(req.bucket, ownership=Unset())
    ctx.forget_bucket(req.bucket)
    return Response(204)


# ------------------------------------------------------------------ bucket policy and public access block
def _no_policy(req) -> S3Error:
    return S3Error("NoSuchBucketPolicy", "The bucket policy does not exist", 404, BucketName=req.bucket)


async def get_policy(ctx, req):
    info = await bucket_owned(ctx, req)
    if not info.policy:
        raise _no_policy(req)
    return Response(200, [("content-type", "application/json")], info.policy.encode())


async def put_policy(ctx, req):
    await bucket_owned(ctx, req)
    body = await read_all(req.receive, 1 << 20)  # over 20 KiB: MalformedPolicy from the check
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.MalformedPolicy("This policy contains invalid Json") from None
    policy.check(text, req.bucket)  # the NameNode checks it again; this answers before anything is sent
    await ctx.cluster.namenode.bucket_settings(req.bucket, policy=text)
    ctx.forget_bucket(req.bucket)
    return Response(204)


async def delete_policy(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_settings(req.bucket, policy=Unset())
    ctx.forget_bucket(req.bucket)
    return Response(204)


async def get_policy_status(ctx, req):
    """IsPublic: the policy lets everyone in (AWS's test: no condition pinning it to accounts or networks), or the
    bucket's ACL grants everyone or every authenticated user something (unless its public access block ignores
    public ACLs). A bucket without a policy answers by its ACL alone."""
    info = await bucket_owned(ctx, req)
    public = bool(info.policy) and policy.is_public(policy.parse(info.policy)) or is_public_acl(effective_acl(info, info.acl))
    return Response(200, [("content-type", "application/xml")],
                    xml.doc("PolicyStatus", f"<IsPublic>{'true' if public else 'false'}</IsPublic>"))


_PAB_FIELDS = (("BlockPublicAcls", "block_public_acls"), ("IgnorePublicAcls", "ignore_public_acls"),
               ("BlockPublicPolicy", "block_public_policy"), ("RestrictPublicBuckets", "restrict_public_buckets"))


async def get_public_access_block(ctx, req):
    info = await bucket_owned(ctx, req)
    pab = info.public_access_block
    if pab is None:
        raise S3Error("NoSuchPublicAccessBlockConfiguration", "The public access block configuration was not found",
                      404, BucketName=req.bucket)
    body = "".join(f"<{x}>{'true' if getattr(pab, a) else 'false'}</{x}>" for x, a in _PAB_FIELDS)
    return Response(200, [("content-type", "application/xml")], xml.doc("PublicAccessBlockConfiguration", body))


async def put_public_access_block(ctx, req):
    await bucket_owned(ctx, req)
    root = xml.parse(await read_all(req.receive, 64 << 10))
    if root.tag != "PublicAccessBlockConfiguration":
        raise malformed_xml()
    flags = {}
    for x, a in _PAB_FIELDS:
        v = root.findtext(x)
        if v is not None and v.strip().lower() not in ("true", "false"):
            raise malformed_xml()
        flags[a] = v is not None and v.strip().lower() == "true"
    await ctx.cluster.namenode.bucket_settings(req.bucket, public_access_block=PublicAccessBlock(**flags))
    ctx.forget_bucket(req.bucket)
    return Response(200)


async def delete_public_access_block(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_settings(req.bucket, remove_public_access_block=True)
    ctx.forget_bucket(req.bucket)
    return Response(204)
