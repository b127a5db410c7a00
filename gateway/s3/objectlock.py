"""Object lock: Get/PutObjectLockConfiguration, Get/PutObjectRetention, Get/PutObjectLegalHold, the
x-amz-object-lock-* headers of PutObject, CopyObject, CreateMultipartUpload and POST uploads (and of GET/HEAD
answers), and who may bypass GOVERNANCE retention.

The NameNode enforces the rules (namenode/meta/lock.py); this module parses and answers S3's documents and headers.
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib

import msgspec

from epochfs.common import errors
from epochfs.common.checksums import ALGORITHMS
from epochfs.common.messages import BucketRecord, LockRule, ObjectLockConfig

from . import xml
from .access import bucket_access, is_owner
from .body import BodyCheck, read_all
from .errors import invalid_request, malformed_xml
from .http import Response

MODES = ("GOVERNANCE", "COMPLIANCE")
MODE_HEADER, UNTIL_HEADER, HOLD_HEADER = \
    "x-amz-object-lock-mode", "x-amz-object-lock-retain-until-date", "x-amz-object-lock-legal-hold"
BYPASS_HEADER = "x-amz-bypass-governance-retention"
_MAX_DOC = 64 << 10


# ---------------------------------------------------------------- dates
def parse_date(v: str) -> int | None:
    """An ISO 8601 date-time (what SDKs send: 2030-01-01T00:00:00Z, fractions and offsets allowed) as ms since the
    epoch; None if it isn't one. A date without a zone is UTC."""
    try:
        d = dt.datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.timezone.utc)
    try:
        return int(d.timestamp() * 1000)
    except (OverflowError, OSError):
        return None


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# ---------------------------------------------------------------- headers of writes and reads
def _digest_sent(headers: dict) -> bool:
    return "content-md5" in headers or "x-amz-sdk-checksum-algorithm" in headers or "x-amz-trailer" in headers \
        or any(f"x-amz-checksum-{a}" in headers for a in ALGORITHMS)


def with_lock(req, info: BucketRecord, attrs, *, put: bool = False):
    """`attrs` (an ObjectRecord or UploadAttrs) with the request's object lock headers; InvalidArgument for a bad
    one, InvalidRequest in a bucket without object lock. `put`: a PutObject, which AWS wants with a Content-MD5 or
    a checksum when it sets a retention or lands in a bucket with a default one."""
    h = req.headers
    mode, until, hold = h.get(MODE_HEADER), h.get(UNTIL_HEADER), h.get(HOLD_HEADER)
    if mode is None and until is None and hold is None:
        if put and info.object_lock is not None and info.object_lock.rule is not None and not _digest_sent(h):
            raise invalid_request("Content-MD5 OR x-amz-checksum- HTTP header is required for Put Object requests "
                                  "with Object Lock parameters")
        return attrs
    if info.object_lock is None:
        raise errors.ObjectLockNotEnabled("Bucket is missing ObjectLockConfiguration")
    if (mode is None) != (until is None):
        raise errors.InvalidInput("x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be "
                                  "supplied", argument=MODE_HEADER if mode is None else UNTIL_HEADER)
    changes = {}
    if mode is not None:
        if mode not in MODES:
            raise errors.InvalidInput("Unknown wormMode directive.", argument=MODE_HEADER, value=mode)
        ms = parse_date(until)
        if ms is None:
            raise errors.InvalidInput("The retain until date must be an ISO 8601 date-time", argument=UNTIL_HEADER)
        if ms <= int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000):
            raise errors.InvalidInput("The retain until date must be in the future!", argument=UNTIL_HEADER)
        changes.update(lock_mode=mode, lock_until=ms)
    if hold is not None:
        if hold not in ("ON", "OFF"):
            raise errors.InvalidInput("Legal Hold must be either of 'ON' or 'OFF'", argument=HOLD_HEADER)
        changes["legal_hold"] = hold == "ON"
    if put and not _digest_sent(h):
        raise invalid_request("Content-MD5 OR x-amz-checksum- HTTP header is required for Put Object requests with "
                              "Object Lock parameters")
    return msgspec.structs.replace(attrs, **changes)


def lock_headers(obj) -> list[tuple[str, str]]:
    """GET/HEAD: the version's retention and legal hold."""
    h = []
    if obj.lock_mode and obj.lock_until is not None:
        h += [(MODE_HEADER, obj.lock_mode), (UNTIL_HEADER, iso(obj.lock_until))]
    if obj.legal_hold is not None:
        h.append((HOLD_HEADER, "ON" if obj.legal_hold else "OFF"))
    return h


def bypass(ctx, req, info: BucketRecord) -> bool:
    """x-amz-bypass-governance-retention: true, from a caller who may (the bucket's owner, an admin, or a key with
    owner rights on the bucket; s3:BypassGovernanceRetention once bucket policies decide it)."""
    return req.headers.get(BYPASS_HEADER, "").strip().lower() == "true" and is_owner(ctx, req, info)


# ---------------------------------------------------------------- documents
async def read_document(req) -> bytes:
    """A small XML body that AWS wants with a Content-MD5 or a checksum (checked against the body)."""
    body = await read_all(req.receive, _MAX_DOC)
    if not _digest_sent(req.headers):
        raise invalid_request("Missing required header for this request: Content-MD5")
    if "content-md5" in req.headers:
        if base64.b64encode(hashlib.md5(body).digest()).decode() != req.headers["content-md5"].strip():
            raise errors.ChecksumMismatch("The Content-MD5 you specified did not match what we received.")
    check = BodyCheck({k: v for k, v in req.headers.items() if k.startswith("x-amz-checksum-")}, None)
    check.update(body)
    check.verify()
    return body


def _root(body: bytes, tag: str):
    root = xml.parse(body)
    if root.tag != tag:
        raise malformed_xml()
    return root


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.strip()
    if not t.lstrip("-").isdigit() or len(t) > 12:
        raise malformed_xml()
    return int(t)


def _config_xml(cfg: ObjectLockConfig) -> bytes:
    rule = ""
    if cfg.rule is not None:
        r = cfg.rule
        period = f"<Days>{r.days}</Days>" if r.days is not None else f"<Years>{r.years}</Years>"
        rule = f"<Rule><DefaultRetention><Mode>{r.mode}</Mode>{period}</DefaultRetention></Rule>"
    return xml.doc("ObjectLockConfiguration", f"<ObjectLockEnabled>Enabled</ObjectLockEnabled>{rule}")


async def get_lock_config(ctx, req):
    info = await bucket_access(ctx, req)
    if info.object_lock is None:
        raise errors.NoObjectLockConfiguration("Object Lock configuration does not exist for this bucket",
                                               bucket_name=req.bucket)
    return Response(200, [("content-type", "application/xml")], _config_xml(info.object_lock))


async def put_lock_config(ctx, req):
    await bucket_access(ctx, req)
    root = _root(await read_document(req), "ObjectLockConfiguration")
    if (root.findtext("ObjectLockEnabled") or "").strip() != "Enabled":
        raise malformed_xml()
    rules = root.findall("Rule")
    rule = None
    if len(rules) > 1:
        raise malformed_xml()
    if rules:
        drs = rules[0].findall("DefaultRetention")
        if len(drs) != 1:
            raise malformed_xml()
        mode = (drs[0].findtext("Mode") or "").strip()
        days, years = _int(drs[0].findtext("Days")), _int(drs[0].findtext("Years"))
        if mode not in MODES or (days is None) == (years is None):
            raise malformed_xml()
        if (days if days is not None else years) <= 0:
            raise errors.InvalidRetentionPeriod("Default retention period must be a positive integer value.")
        rule = LockRule(mode=mode, days=days, years=years)
    await ctx.cluster.namenode.bucket_object_lock(req.bucket, ObjectLockConfig(rule=rule))
    ctx.forget_bucket(req.bucket)
    return Response(200)


async def _locked_object(ctx, req, perm: str):
    info = await bucket_access(ctx, req, perm)
    if info.object_lock is None:
        raise errors.ObjectLockNotEnabled("Bucket is missing Object Lock Configuration")
    return info


async def get_retention(ctx, req):
    await _locked_object(ctx, req, "read")
    obj = (await ctx.cluster.namenode.stat(req.bucket, req.key, req.query.get("versionId"), (0, 0))).obj
    if not obj.lock_mode or obj.lock_until is None:
        raise errors.NoSuchObjectLockConfiguration("The specified object does not have a ObjectLock configuration")
    body = xml.doc("Retention", f"<Mode>{obj.lock_mode}</Mode><RetainUntilDate>{iso(obj.lock_until)}"
                                f"</RetainUntilDate>")
    return Response(200, [("content-type", "application/xml")], body)


async def put_retention(ctx, req):
    info = await _locked_object(ctx, req, "write")
    root = _root(await read_document(req), "Retention")
    mode, until = root.findtext("Mode"), root.findtext("RetainUntilDate")
    if (mode is None) != (until is None) or (mode is not None and mode.strip() not in MODES):
        raise malformed_xml()
    ms = None
    if until is not None:
        ms = parse_date(until)
        if ms is None:
            raise malformed_xml()
    await ctx.cluster.namenode.object_lock_set(req.bucket, req.key, req.query.get("versionId"), retention=True,
                                               mode=mode.strip() if mode else None, until=ms,
                                               bypass=bypass(ctx, req, info))
    return Response(200)


async def get_legal_hold(ctx, req):
    await _locked_object(ctx, req, "read")
    obj = (await ctx.cluster.namenode.stat(req.bucket, req.key, req.query.get("versionId"), (0, 0))).obj
    if obj.legal_hold is None:
        raise errors.NoSuchObjectLockConfiguration("The specified object does not have a ObjectLock configuration")
    return Response(200, [("content-type", "application/xml")],
                    xml.doc("LegalHold", f"<Status>{'ON' if obj.legal_hold else 'OFF'}</Status>"))


async def put_legal_hold(ctx, req):
    await _locked_object(ctx, req, "write")
    status = (_root(await read_document(req), "LegalHold").findtext("Status") or "").strip()
    if status not in ("ON", "OFF"):
        raise malformed_xml()
    await ctx.cluster.namenode.object_lock_set(req.bucket, req.key, req.query.get("versionId"),
                                               legal_hold=status == "ON")
    return Response(200)


def bucket_route(req):
    h = {"GET": get_lock_config, "PUT": put_lock_config}.get(req.method)
    if h is None:
        raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")
    return h


def object_route(req):
    table = {"GET": get_retention, "PUT": put_retention} if "retention" in req.query else \
        {"GET": get_legal_hold, "PUT": put_legal_hold}
    h = table.get(req.method)
    if h is None:
        raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")
    return h
