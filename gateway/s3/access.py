"""Who may do what: owners (and admins) do everything in their buckets; others get what the ACLs grant.

An ACL is stored on a bucket or object either as a canned name (private, public-read, public-read-write,
authenticated-read) or as a list of grants [grantee, permission], where grantee is "id:<canonical user id>" or
"uri:<group URI>".

Keys made through the admin API also carry per-bucket permissions: "read" (list, get, head), "write" (read, put,
delete, multipart) and "owner" (everything the bucket's owner may do). They add to what ownership and ACLs give;
anonymous requests get only what an ACL grants to AllUsers.

A bucket's object ownership ("own", set with PutBucketOwnershipControls or x-amz-object-ownership at creation) says
who owns the objects written into it: ObjectWriter (also when none is set) the writer; BucketOwnerPreferred the
bucket owner when the writer grants it bucket-owner-full-control; BucketOwnerEnforced always the bucket owner, and
ACLs are off: they grant nothing, and requests that set one fail with AccessControlListNotSupported.
"""
from __future__ import annotations

from epochfs.common import errors
from epochfs.common.messages import BucketRecord, ObjectRecord

from . import xml
from .errors import S3Error, not_implemented
from .sigv4 import User

ANONYMOUS = User(access_key="", secret_key="", owner_id="", display_name="anonymous")
CANNED = ("private", "public-read", "public-read-write", "authenticated-read")
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTH_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
PERMISSIONS = ("READ", "WRITE", "READ_ACP", "WRITE_ACP", "FULL_CONTROL")
_CANNED_GRANTS = {"private": [], "public-read": [[f"uri:{ALL_USERS}", "READ"]],
                  "public-read-write": [[f"uri:{ALL_USERS}", "READ"], [f"uri:{ALL_USERS}", "WRITE"]],
                  "authenticated-read": [[f"uri:{AUTH_USERS}", "READ"]]}
_GRANT_HEADERS = {"x-amz-grant-read": "READ", "x-amz-grant-write": "WRITE", "x-amz-grant-read-acp": "READ_ACP",
                  "x-amz-grant-write-acp": "WRITE_ACP", "x-amz-grant-full-control": "FULL_CONTROL"}


OWNERSHIP = ("BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter")


def acls_disabled(info: BucketRecord) -> bool:
    return info.ownership == "BucketOwnerEnforced"


def acl_not_supported() -> S3Error:
    return S3Error("AccessControlListNotSupported", "The bucket does not allow ACLs", 400)


def check_ownership(own: str, bucket_acl) -> None:
    """Is `own` an object ownership setting that a bucket with ACL `bucket_acl` may take?"""
    if own not in OWNERSHIP:
        raise errors.InvalidInput(f"Invalid x-amz-object-ownership value {own!r}")
    if own == "BucketOwnerEnforced" and _grant_list(bucket_acl):
        raise S3Error("InvalidBucketAclWithObjectOwnership",
                      "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting", 400)


def new_object_acl(req, info: BucketRecord) -> tuple[str, object]:
    """(owner, ACL) of an object the request writes into bucket `info`, by the bucket's object ownership."""
    if acls_disabled(info):
        if req.headers.get("x-amz-acl", "bucket-owner-full-control") != "bucket-owner-full-control" \
                or any(h in req.headers for h in _GRANT_HEADERS):
            raise acl_not_supported()
        return info.owner, "private"
    acl = canned_acl(req)
    if info.ownership == "BucketOwnerPreferred" and req.headers.get("x-amz-acl") == "bucket-owner-full-control":
        return info.owner, acl
    return req.user.owner_id, acl


def _acl(info: BucketRecord, acl):
    """What an ACL stored in bucket `info` grants: nothing while the bucket's ACLs are off."""
    return None if acls_disabled(info) else acl


def _grant_list(acl) -> list:
    if acl is None or isinstance(acl, str):
        return _CANNED_GRANTS.get(acl or "private", [])
    return acl


def _canonical(grant_list: list):
    """Store a canned name where the grants amount to one (smaller, and reads back as the same ACL)."""
    for name, g in _CANNED_GRANTS.items():
        if sorted(map(tuple, grant_list)) == sorted(map(tuple, g)):
            return name
    return grant_list


def canned_acl(req):
    """The ACL a request sets with x-amz-acl or x-amz-grant-* headers (private when it sets none)."""
    header_grants = []
    for h, perm in _GRANT_HEADERS.items():
        for item in filter(None, (x.strip() for x in req.headers.get(h, "").split(","))):
            kind, _, val = item.partition("=")
            kind, val = kind.strip().lower(), val.strip().strip('"')
            if kind == "emailaddress" and val:
                raise not_implemented("grants by e-mail address")
            if kind not in ("id", "uri") or not val:
                raise errors.InvalidInput(f"Invalid grant in {h}: use id=\"<canonical id>\", "
                                          "uri=\"<group URI>\" or emailAddress=\"<address>\"", argument=h,
                                          value=req.headers[h])
            header_grants.append([f"{kind}:{val}", perm])
    if header_grants:
        if "x-amz-acl" in req.headers:
            raise S3Error("InvalidRequest", "Specifying both Canned ACLs and Header Grants is not allowed", 400)
        return _canonical(header_grants)
    acl = req.headers.get("x-amz-acl", "private")
    if acl in ("aws-exec-read", "bucket-owner-read", "bucket-owner-full-control", "log-delivery-write"):
        return "private"  # grants to the bucket owner or AWS services only: the owner has them anyway
    if acl not in CANNED:
        raise errors.InvalidInput(f"unknown canned ACL {acl!r}")
    return acl


def grants(acl, perm: str, req) -> bool:
    """Does the ACL give `perm` ("read" or "write") to the caller, who is not the owner?"""
    want = {"read": ("READ", "FULL_CONTROL"), "write": ("WRITE", "FULL_CONTROL")}[perm]
    me = f"id:{req.user.owner_id}" if req.auth is not None else None
    for grantee, p in _grant_list(acl):
        if p not in want:
            continue
        if grantee == f"uri:{ALL_USERS}" or (req.auth is not None and grantee == f"uri:{AUTH_USERS}") or \
                (me is not None and grantee == me):
            return True
    return False


_RANK = {"read": 1, "write": 2, "owner": 3}


def key_allows(user: User, bucket: str, perm: str) -> bool:
    """Does the key's own permission on `bucket` cover `perm` ("read", "write" or "owner")?"""
    return user.buckets is not None and _RANK.get(user.buckets.get(bucket, ""), 0) >= _RANK[perm]


def is_owner(ctx, req, info: BucketRecord) -> bool:
    return req.auth is not None and (info.owner == req.user.owner_id or ctx.is_admin(req.user)
                                     or key_allows(req.user, info.name, "owner"))


def may_list(ctx, req, info: BucketRecord) -> bool:
    """May the caller list the bucket (and so learn which keys exist)?"""
    return is_owner(ctx, req, info) or (req.auth is not None and key_allows(req.user, info.name, "read")) \
        or grants(_acl(info, info.acl), "read", req)


async def bucket_access(ctx, req, perm: str | None = None) -> BucketRecord:
    """The bucket's record, if the caller owns it or its ACL grants `perm`; AccessDenied otherwise.

    perm=None: owner only. "read": list the bucket. "write": put/delete objects. "object": the decision is the
    object's ACL (check_object_read after the stat)."""
    info = await ctx.bucket(req.bucket)
    if is_owner(ctx, req, info):
        return info
    if perm == "object" or (perm is not None and grants(_acl(info, info.acl), perm, req)):
        return info
    if perm is not None and req.auth is not None and key_allows(req.user, req.bucket, perm):
        return info
    raise errors.PermissionDenied("Access Denied")


def check_object_read(ctx, req, info: BucketRecord, obj: ObjectRecord | None) -> None:
    if is_owner(ctx, req, info) or (req.auth is not None and key_allows(req.user, info.name, "read")):
        return
    if obj is None:  # missing key: say so only to those who may list the bucket
        if grants(_acl(info, info.acl), "read", req):
            raise errors.NoSuchKey("The specified key does not exist.")
        raise errors.PermissionDenied("Access Denied")
    if not grants(_acl(info, obj.acl), "read", req):
        raise errors.PermissionDenied("Access Denied")


def acl_xml(acl, owner_id: str, display: str, names=lambda i: i) -> bytes:
    def grant(grantee: str, perm: str) -> str:
        if grantee.startswith("uri:"):
            g = f'xsi:type="Group"><URI>{xml.esc(grantee[4:])}</URI></Grantee>'
        else:
            gid = grantee[3:]
            g = f'xsi:type="CanonicalUser"><ID>{xml.esc(gid)}</ID><DisplayName>{xml.esc(names(gid))}' \
                f"</DisplayName></Grantee>"
        return (f'<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" {g}'
                f"<Permission>{perm}</Permission></Grant>")
    out = [grant(f"id:{owner_id}", "FULL_CONTROL")]
    out += [grant(g, p) for g, p in _grant_list(acl) if not (g == f"id:{owner_id}" and p == "FULL_CONTROL")]
    return xml.doc("AccessControlPolicy", f"{xml.owner(owner_id, display)}<AccessControlList>{''.join(out)}"
                                          f"</AccessControlList>")


def acl_from_xml(body: bytes, owner_id: str):
    """The ACL an AccessControlPolicy document sets (the owner's own FULL_CONTROL is implied)."""
    root = xml.parse(body)
    out = []
    for g in root.iter("Grant"):
        grantee = g.find("Grantee")
        perm = (g.findtext("Permission") or "").strip()
        if grantee is None or perm not in PERMISSIONS:
            raise S3Error("MalformedACLError", "The XML you provided was not well-formed or did not validate "
                          "against our published schema.", 400)
        uri, gid = grantee.findtext("URI"), grantee.findtext("ID")
        if uri:
            out.append([f"uri:{uri.strip()}", perm])
        elif gid:
            if gid.strip() == owner_id and perm == "FULL_CONTROL":
                continue
            out.append([f"id:{gid.strip()}", perm])
        else:
            raise not_implemented("grants by e-mail address")
    return _canonical(out)
