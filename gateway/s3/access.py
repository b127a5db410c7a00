"""Who may do what: owners (and admins) do everything in their buckets; others get what the canned ACLs grant.

Canned ACLs stored on buckets and objects: private, public-read, public-read-write, authenticated-read.
Per-key grants managed by operators come with the admin API.
"""
from __future__ import annotations

from epochfs.common import errors

from . import xml
from .errors import S3Error, access_denied, not_implemented
from .sigv4 import User

ANONYMOUS = User(access_key="", secret_key="", owner_id="", display_name="anonymous")
CANNED = ("private", "public-read", "public-read-write", "authenticated-read")
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTH_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"


def canned_acl(req) -> str:
    acl = req.headers.get("x-amz-acl", "private")
    if acl not in CANNED:
        if acl in ("aws-exec-read", "bucket-owner-read", "bucket-owner-full-control", "log-delivery-write"):
            return "private"  # grants to the bucket owner or AWS services only: the owner has them anyway
        raise S3Error("InvalidArgument", f"unknown canned ACL {acl!r}", 400)
    if any(h.startswith("x-amz-grant-") for h in req.headers):
        raise not_implemented("x-amz-grant-* headers (use a canned ACL)")
    return acl


def grants(acl: str | None, perm: str, authenticated: bool) -> bool:
    """Does the canned ACL give `perm` ("read" or "write") to someone who is not the owner?"""
    acl = acl or "private"
    if perm == "read":
        return acl in ("public-read", "public-read-write") or (authenticated and acl == "authenticated-read")
    if perm == "write":
        return acl == "public-read-write"
    return False


def is_owner(ctx, req, info: dict) -> bool:
    return req.auth is not None and (info.get("owner") == req.user.owner_id or ctx.is_admin(req.user))


async def bucket_access(ctx, req, perm: str | None = None) -> dict:
    """The bucket's record, if the caller owns it or its ACL grants `perm`; AccessDenied otherwise.

    perm=None: owner only. "read": list the bucket. "write": put/delete objects. "object": the decision is the
    object's ACL (check_object_read after the stat)."""
    info = await ctx.bucket(req.bucket)
    if is_owner(ctx, req, info):
        return info
    if perm == "object" or (perm is not None and grants(info.get("acl"), perm, req.auth is not None)):
        return info
    raise access_denied()


def check_object_read(ctx, req, info: dict, obj: dict | None) -> None:
    if is_owner(ctx, req, info):
        return
    if obj is None:  # missing key: say so only to those who may list the bucket
        if grants(info.get("acl"), "read", req.auth is not None):
            raise errors.NoSuchKey("The specified key does not exist.")
        raise access_denied()
    if not grants(obj.get("acl"), "read", req.auth is not None):
        raise access_denied()


def acl_xml(acl: str | None, owner_id: str, display: str) -> bytes:
    def grant(grantee: str, perm: str) -> str:
        return (f'<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" {grantee}'
                f"<Permission>{perm}</Permission></Grant>")
    owner_g = f'xsi:type="CanonicalUser"><ID>{xml.esc(owner_id)}</ID><DisplayName>{xml.esc(display)}</DisplayName>' \
              f"</Grantee>"
    out = [grant(owner_g, "FULL_CONTROL")]
    acl = acl or "private"
    if acl in ("public-read", "public-read-write"):
        out.append(grant(f'xsi:type="Group"><URI>{ALL_USERS}</URI></Grantee>', "READ"))
    if acl == "public-read-write":
        out.append(grant(f'xsi:type="Group"><URI>{ALL_USERS}</URI></Grantee>', "WRITE"))
    if acl == "authenticated-read":
        out.append(grant(f'xsi:type="Group"><URI>{AUTH_USERS}</URI></Grantee>', "READ"))
    return xml.doc("AccessControlPolicy", f"{xml.owner(owner_id, display)}<AccessControlList>{''.join(out)}"
                                          f"</AccessControlList>")


def acl_from_xml(body: bytes, owner_id: str) -> str:
    """The canned ACL an AccessControlPolicy document amounts to; NotImplemented for grants no canned ACL expresses."""
    root = xml.parse(body)
    perms = set()
    for g in root.iter("Grant"):
        grantee = g.find("Grantee")
        perm = g.findtext("Permission") or ""
        uri = grantee.findtext("URI") if grantee is not None else None
        gid = grantee.findtext("ID") if grantee is not None else None
        if gid == owner_id and perm == "FULL_CONTROL":
            continue
        perms.add((uri, perm))
    for acl in CANNED:
        want = {"private": set(), "public-read": {(ALL_USERS, "READ")},
                "public-read-write": {(ALL_USERS, "READ"), (ALL_USERS, "WRITE")},
                "authenticated-read": {(AUTH_USERS, "READ")}}[acl]
        if perms == want:
            return acl
    raise not_implemented("ACL grants other than the canned ACLs")
