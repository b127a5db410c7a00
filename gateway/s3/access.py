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

A bucket policy (common/policy.py) is evaluated first on every request that reaches the bucket, with the request's
S3 action (router.action_of) and resource: an explicit Deny refuses it whoever the caller is (the owner keeps the
policy calls), an Allow admits it, and where the policy says nothing the rules above decide. The public access
block filters public ACL grants (IgnorePublicAcls), refuses public ACLs (BlockPublicAcls) and lets a public policy
admit only the owner (RestrictPublicBuckets).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable

from epochfs.common import errors, policy
from epochfs.common.messages import BucketRecord, ObjectRecord

from . import xml
from .errors import S3Error
from .sigv4 import User

ANONYMOUS = User(access_key="", secret_key="", owner_id="", display_name="anonymous")
CANNED = ("private", "public-read", "public-read-write", "authenticated-read")
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTH_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
LOG_DELIVERY = "http://acs.amazonaws.com/groups/s3/LogDelivery"
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


def check_ownership(own: str, bucket_acl, owner_id: str) -> None:
    """Is `own` an object ownership setting that a bucket with ACL `bucket_acl` may take?"""
    if own not in OWNERSHIP:
        raise errors.InvalidInput(f"Invalid x-amz-object-ownership value {own!r}")
    if own == "BucketOwnerEnforced" and [g for g in _grant_list(bucket_acl) if g[0] != f"id:{owner_id}"]:
        raise S3Error("InvalidBucketAclWithObjectOwnership",
                      "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting", 400)


async def new_object_acl(ctx, req, info: BucketRecord) -> tuple[str, object]:
    """(owner, ACL) of an object the request writes into bucket `info`, by the bucket's object ownership."""
    if acls_disabled(info):
        if req.headers.get("x-amz-acl", "bucket-owner-full-control") != "bucket-owner-full-control" \
                or any(h in req.headers for h in _GRANT_HEADERS):
            raise acl_not_supported()
        return info.owner, "private"
    acl = await canned_acl(ctx, req)
    check_public_acl(info, acl)
    canned = req.headers.get("x-amz-acl")
    if info.ownership == "BucketOwnerPreferred" and canned == "bucket-owner-full-control":
        return info.owner, acl
    writer = req.user.owner_id
    if canned in ("bucket-owner-full-control", "bucket-owner-read") and writer != info.owner:
        # the writer keeps full control and the bucket owner gets the rest, listed as such
        acl = [[f"id:{writer}", "FULL_CONTROL"],
               [f"id:{info.owner}", "FULL_CONTROL" if canned == "bucket-owner-full-control" else "READ"]]
    return writer, acl


def effective_acl(info: BucketRecord, acl):
    """What an ACL stored in bucket `info` grants: nothing while the bucket's ACLs are off; without the grants to
    everyone and to all authenticated users while its public access block ignores public ACLs."""
    if acls_disabled(info):
        return None
    pab = info.public_access_block
    if pab is not None and pab.ignore_public_acls:
        return [g for g in _grant_list(acl) if g[0] not in (f"uri:{ALL_USERS}", f"uri:{AUTH_USERS}")]
    return acl


def _grant_list(acl) -> list:
    if acl is None or isinstance(acl, str):
        return _CANNED_GRANTS.get(acl or "private", [])
    return acl


def log_delivery_granted(info: BucketRecord) -> bool:
    """Does the bucket's ACL give the log-delivery group WRITE and READ_ACP (the ACL way to let the logging service
    write server access logs into it; nothing while its ACLs are off)?"""
    have = {p for g, p in _grant_list(effective_acl(info, info.acl)) if g == f"uri:{LOG_DELIVERY}"}
    return bool(have & {"WRITE", "FULL_CONTROL"}) and bool(have & {"READ_ACP", "FULL_CONTROL"})


def is_public_acl(acl) -> bool:
    """AWS: an ACL is public if it grants anything to AllUsers or AuthenticatedUsers."""
    return any(g in (f"uri:{ALL_USERS}", f"uri:{AUTH_USERS}") for g, _ in _grant_list(acl))


def check_public_acl(info: BucketRecord, acl) -> None:
    """Refuse to set a public ACL in a bucket whose public access block says BlockPublicAcls."""
    pab = info.public_access_block
    if pab is not None and pab.block_public_acls and is_public_acl(acl):
        raise errors.PermissionDenied("Access Denied")


async def canned_acl(ctx, req):
    """The ACL a request sets with x-amz-acl or x-amz-grant-* headers (private when it sets none)."""
    header_grants = []
    for h, perm in _GRANT_HEADERS.items():
        for item in filter(None, (x.strip() for x in req.headers.get(h, "").split(","))):
            kind, _, val = item.partition("=")
            kind, val = kind.strip().lower(), val.strip().strip('"')
            if kind not in ("id", "uri", "emailaddress") or not val:
                raise errors.InvalidInput(f"Invalid grant in {h}: use id=\"<canonical id>\", "
                                          "uri=\"<group URI>\" or emailAddress=\"<address>\"", argument=h,
                                          value=req.headers[h])
            header_grants.append(await _grantee(ctx, {"emailaddress": "email"}.get(kind, kind), val) + [perm])
    if header_grants:
        if "x-amz-acl" in req.headers:
            raise S3Error("InvalidRequest", "Specifying both Canned ACLs and Header Grants is not allowed", 400)
        return header_grants
    acl = req.headers.get("x-amz-acl", "private")
    if acl in ("aws-exec-read", "bucket-owner-read", "bucket-owner-full-control", "log-delivery-write"):
        return "private"  # grants to the bucket owner or AWS services only: the owner has them anyway
    if acl not in CANNED:
        raise errors.InvalidInput(f"unknown canned ACL {acl!r}")
    return acl


async def _grantee(ctx, kind: str, val: str) -> list:
    """A grantee as stored (["id:<canonical id>"] or ["uri:<group>"]); an e-mail address resolves to its user."""
    if kind == "uri":
        if val not in (ALL_USERS, AUTH_USERS, LOG_DELIVERY):
            raise errors.InvalidInput("Invalid group uri", argument="uri", value=val)
        return [f"uri:{val}"]
    known = await ctx.canonical_ids()
    if kind == "email":
        for oid, email in known.items():
            if email and email.lower() == val.lower():
                return [f"id:{oid}"]
        raise S3Error("UnresolvableGrantByEmailAddress",
                      "The e-mail address you provided does not match any account on record.", 400)
    if val not in known:
        raise errors.InvalidInput("Invalid id", argument="CanonicalUser/ID", value=val)
    return [f"id:{val}"]


_WANT = {"read": ("READ", "FULL_CONTROL"), "write": ("WRITE", "FULL_CONTROL"),
         "read_acp": ("READ_ACP", "FULL_CONTROL"), "write_acp": ("WRITE_ACP", "FULL_CONTROL")}


def grants(acl, perm: str, req) -> bool:
    """Does the ACL give `perm` ("read", "write", "read_acp" or "write_acp") to the caller, who is not the owner?"""
    want = _WANT[perm]
    me = f"id:{req.user.owner_id}" if req.auth is not None else None
    for grantee, p in _grant_list(acl):
        if p not in want:
            continue
        if grantee == f"uri:{ALL_USERS}" or (req.auth is not None and grantee == f"uri:{AUTH_USERS}") or \
                (me is not None and grantee == me):
            return True
    return False


_RANK = {"read": 1, "write": 2, "owner": 3, "read_acp": 3, "write_acp": 3}


def key_allows(user: User, bucket: str, perm: str) -> bool:
    """Does the key's own permission on `bucket` cover `perm` ("read", "write" or "owner")?"""
    return user.buckets is not None and _RANK.get(user.buckets.get(bucket, ""), 0) >= _RANK[perm]


def is_owner(ctx, req, info: BucketRecord) -> bool:
    return req.auth is not None and (info.owner == req.user.owner_id or ctx.is_admin(req.user)
                                     or key_allows(req.user, info.name, "owner"))


# ------------------------------------------------------------------ bucket policies
# the actions on the policy itself: the bucket's owner keeps them whatever the policy says, so it can't lock itself out
POLICY_ACTIONS = frozenset(("s3:GetBucketPolicy", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy"))
# condition-key families a feature fills per request: prefix (lower case) -> fn(ctx, req, info, key, obj) ->
# resolver (obj: the object's record where the check has it, else None). Object tagging (gateway/s3/tagging.py)
# registers "s3:existingobjecttag/" and "s3:requestobjecttag/" here.
CONDITION_RESOLVERS: dict[str, Callable] = {}

@functools.lru_cache(maxsize=256)
def parsed_policy(text: str) -> policy.Policy:
    return policy.parse(text)


def _context(ctx, req, info: BucketRecord, action: str, key: str | None,
             any_key: bool = False, obj: ObjectRecord | None = None) -> policy.RequestContext:
    u = req.user
    caller = policy.Caller(u.owner_id, u.display_name, u.access_key) if req.auth is not None else policy.Caller()
    now = time.time()
    keys: dict = {"aws:sourceip": req.client_ip, "aws:securetransport": "true" if req.secure else "false",
                  "aws:currenttime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                  "aws:epochtime": str(int(now)), "s3:resourceaccount": info.owner}
    if req.auth is not None:
        keys.update({"aws:username": u.display_name, "aws:userid": u.owner_id, "aws:principalaccount": u.owner_id,
                     "aws:principaltype": "User", "s3:signatureversion": "AWS4-HMAC-SHA256",
                     "s3:authtype": "REST-QUERY-STRING" if "x-amz-signature" in (k.lower() for k in req.query)
                     or "Signature" in req.query else "REST-HEADER"})
    else:
        keys["aws:principaltype"] = "Anonymous"
    for h in ("user-agent", "referer"):
        if h in req.headers:
            keys[f"aws:{h.replace('-', '')}"] = req.headers[h]
    for q in ("prefix", "delimiter", "max-keys"):
        if q in req.query:
            keys[f"s3:{q}"] = req.query[q]
    if "versionId" in req.query:
        keys["s3:versionid"] = req.query["versionId"]
    for h, v in req.headers.items():  # s3:x-amz-acl, s3:x-amz-grant-*, s3:x-amz-server-side-encryption*, ...
        if h.startswith("x-amz-") and not h.startswith(("x-amz-meta-", "x-amz-date", "x-amz-security-token")):
            keys[f"s3:{h}"] = v
    resolvers = {prefix: make(ctx, req, info, key, obj) for prefix, make in CONDITION_RESOLVERS.items()}
    return policy.RequestContext(caller, action, policy.arn(info.name, key), keys, resolvers=resolvers,
                                 any_key=any_key)


def policy_verdict(ctx, req, info: BucketRecord, action: str, key: str | None = None,
                   any_key: bool = False, obj: ObjectRecord | None = None) -> str | None:
    """What the bucket's policy says about this request: "Deny", "Allow" or None (nothing: the ACLs decide).
    any_key: an operation on objects by inode (the mount's), checked against the whole bucket."""
    if not info.policy:
        return None
    pol = parsed_policy(info.policy)
    verdict = policy.evaluate(pol, _context(ctx, req, info, action, key, any_key, obj))
    pab = info.public_access_block
    if verdict == "Allow" and pab is not None and pab.restrict_public_buckets and policy.is_public(pol) \
            and not is_owner(ctx, req, info):
        return None  # a public policy lets in only the owner's account while RestrictPublicBuckets is on
    return verdict


def _by_acl(req, granted: bool) -> bool:
    """`granted`, noting on the request that an ACL grant let it in (the ACLRequired field of its access log
    record, as S3 fills it: "Yes" when neither ownership nor a policy would have)."""
    if granted and hasattr(req, "acl_required"):
        req.acl_required = True
    return granted


def _denied() -> errors.PermissionDenied:
    return errors.PermissionDenied("Access Denied")


def _check_expected_owner(req, info: BucketRecord) -> None:
    want = req.headers.get("x-amz-expected-bucket-owner")
    if want is not None and want != info.owner:
        raise _denied()


def may_list(ctx, req, info: BucketRecord, key: str | None = None) -> bool:
    """May the caller list the bucket (and so learn which keys exist)? With `key`: list with that key as prefix
    (s3:prefix), to learn whether that key exists."""
    if key is not None:
        req = dataclasses.replace(req, key=None, query={**req.query, "prefix": key})
    verdict = policy_verdict(ctx, req, info, "s3:ListBucket")
    if verdict is not None:
        return verdict == "Allow"
    return is_owner(ctx, req, info) or (req.auth is not None and key_allows(req.user, info.name, "read")) \
        or _by_acl(req, grants(effective_acl(info, info.acl), "read", req))


_DEFAULT_ACTION = {None: "s3:PutBucketAcl", "read": "s3:ListBucket", "write": "s3:PutObject",
                   "read_acp": "s3:GetBucketAcl", "write_acp": "s3:PutBucketAcl"}


async def bucket_access(ctx, req, perm: str | None = None, action: str | None = None,
                        any_key: bool = False) -> BucketRecord:
    """The bucket's record, if the bucket's policy or its owner and ACL let the caller do `action` (the request's
    S3 action by default); AccessDenied otherwise. An explicit Deny in the policy wins over everything, except over
    the owner's access to the policy itself.

    perm says what the ACL must grant: None: owner only. "read": list the bucket. "write": put/delete objects.
    "read_acp"/"write_acp": read or change the bucket's ACL. "object": the decision is the object's (check_object_*
    after the stat)."""
    info = await ctx.bucket(req.bucket)
    _check_expected_owner(req, info)
    owner = is_owner(ctx, req, info)
    if perm == "object":
        return info
    action = action or req.action or _DEFAULT_ACTION[perm]
    verdict = policy_verdict(ctx, req, info, action, None if any_key else req.key, any_key)
    if verdict == "Deny" and not (owner and action in POLICY_ACTIONS):
        raise _denied()
    if owner or verdict == "Allow":
        return info
    if perm is not None and _by_acl(req, grants(effective_acl(info, info.acl), perm, req)):
        return info
    if perm is not None and req.auth is not None and key_allows(req.user, req.bucket, perm):
        return info
    raise _denied()


def check_object_write(ctx, req, info: BucketRecord, key: str, action: str, obj: ObjectRecord | None = None) -> None:
    """May the caller do `action` (s3:DeleteObject, ...) on `key` (one item of a batch request; `obj` its record
    where the caller has it, for conditions on its tags)?"""
    verdict = policy_verdict(ctx, req, info, action, key, obj=obj)
    if verdict == "Deny":
        raise _denied()
    if verdict == "Allow" or is_owner(ctx, req, info) or (req.auth is not None and key_allows(
            req.user, info.name, "write")) or _by_acl(req, grants(effective_acl(info, info.acl), "write", req)):
        return
    raise _denied()


def check_object_read(ctx, req, info: BucketRecord, obj: ObjectRecord | None, key: str | None = None,
                      action: str | None = None, perm: str = "read", any_key: bool = False) -> None:
    """May the caller read object `obj` (or its ACL: perm "read_acp", "write_acp")? obj None: the key is missing,
    which only those who may list the bucket learn (NoSuchKey; AccessDenied for the others)."""
    key = req.key if key is None else key
    if action is None:
        action = "s3:GetObjectVersion" if "versionId" in req.query else "s3:GetObject"
    verdict = policy_verdict(ctx, req, info, action, None if any_key else key, any_key, obj)
    if verdict == "Deny":
        raise _denied()
    if is_owner(ctx, req, info) or (req.auth is not None and key_allows(req.user, info.name, perm)):
        return
    if obj is None:
        if may_list(ctx, req, info, key):
            raise errors.NoSuchKey("The specified key does not exist.")
        raise _denied()
    if verdict == "Allow":
        return
    if req.auth is not None and obj.owner == req.user.owner_id and not acls_disabled(info):
        return  # an object's owner (its writer) has full control of it
    if not _by_acl(req, grants(effective_acl(info, obj.acl), perm, req)):
        raise _denied()


def acl_xml(acl, owner_id: str, display: str, names=lambda i: i) -> bytes:
    """An AccessControlPolicy as S3 lists it: a canned ACL as its group grants, then the owner's FULL_CONTROL; an
    explicit ACL (an AccessControlPolicy or x-amz-grant-* headers) as it was set, no owner grant added, its group
    grants first."""
    def grant(grantee: str, perm: str) -> str:
        if grantee.startswith("uri:"):
            g = f'xsi:type="Group"><URI>{xml.esc(grantee[4:])}</URI></Grantee>'
        else:
            gid = grantee[3:]
            g = f'xsi:type="CanonicalUser"><ID>{xml.esc(gid)}</ID><DisplayName>{xml.esc(names(gid))}' \
                f"</DisplayName></Grantee>"
        return (f'<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" {g}'
                f"<Permission>{perm}</Permission></Grant>")
    if acl is None or isinstance(acl, str):
        out = [grant(g, p) for g, p in _grant_list(acl)] + [grant(f"id:{owner_id}", "FULL_CONTROL")]
    else:  # group grants first, the others in the order they were set
        out = [grant(g, p) for g, p in sorted(acl, key=lambda gp: not gp[0].startswith("uri:"))]
    return xml.doc("AccessControlPolicy", f"{xml.owner(owner_id, display)}<AccessControlList>{''.join(out)}"
                                          f"</AccessControlList>")


_XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"


async def acl_from_xml(ctx, body: bytes, owner_id: str):
    """The ACL an AccessControlPolicy document sets, grants in its order (the owner keeps full control anyway)."""
    root = xml.parse(body)
    out = []
    for g in root.iter("Grant"):
        grantee = g.find("Grantee")
        perm = (g.findtext("Permission") or "").strip()
        if grantee is None or perm not in PERMISSIONS:
            raise S3Error("MalformedACLError", "The XML you provided was not well-formed or did not validate "
                          "against our published schema.", 400)
        uri, gid, email = grantee.findtext("URI"), grantee.findtext("ID"), grantee.findtext("EmailAddress")
        if uri:
            out.append(await _grantee(ctx, "uri", uri.strip()) + [perm])
        elif gid:
            out.append(await _grantee(ctx, "id", gid.strip()) + [perm])
        elif email:
            out.append(await _grantee(ctx, "email", email.strip()) + [perm])
        else:
            raise S3Error("MalformedACLError", "The XML you provided was not well-formed or did not validate "
                          "against our published schema.", 400)
    return out
