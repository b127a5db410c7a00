"""Bucket logging: Get/PutBucketLogging, and the server access log records delivered as objects into the target
bucket.

Records (AWS's server access log format, one line each) are buffered in this gateway's memory per target (bucket,
prefix, grants; and source bucket with a partitioned key format, whose key names it), and a buffer is written as one
log object. A buffer rolls like RGW's log objects: the first request to log into a buffer GW_ACCESS_LOG_FLUSH_S old
(or GW_ACCESS_LOG_FLUSH_BYTES big) writes it before that request is answered, and its own record starts the next
one; a buffer no request rolls is written by a background pass once GW_ACCESS_LOG_IDLE_S old (and at shutdown). All
buffers together hold at most GW_ACCESS_LOG_MAX_BYTES; past that, records are dropped and counted
(`epochfs_access_log_dropped_total`). A gateway that crashes (kill -9, power cut) loses the records it has not
written yet (AWS's delivery is best effort too). Each gateway writes its own objects; their keys are unique per
gateway and write.

Delivery is the logging service's write into the target bucket, authorised as AWS documents it: the target's
bucket policy allows the service principal `logging.s3.amazonaws.com` s3:PutObject on the target prefix (with the
source bucket as aws:SourceArn and its owner as aws:SourceAccount for conditions), or, for a target of the same
owner that uses ACLs, its ACL gives the log-delivery group WRITE and READ_ACP. PutBucketLogging checks this (moto
too: InvalidTargetBucketForLogging), and every write checks it again, dropping the records of a source the target
no longer admits. A policy may admit sources of other owners (AWS keeps both buckets in one account; here users
are the accounts). The log objects belong to the target's owner, with the configuration's TargetGrants as their ACL.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import time
from urllib.parse import quote
from dataclasses import dataclass, field

from prometheus_client import Counter

from epochfs.common import errors, policy
from epochfs.common.messages import BucketRecord, LoggingTarget, ObjectRecord
from epochfs.common.worker import PassStats, Worker

from . import xml
from .access import bucket_access, log_delivery_granted, parsed_policy
from .errors import malformed_xml
from .http import Response
from .objectlock import read_document

log = logging.getLogger("epochfs.s3.logging")
LOGGING_SERVICE = "logging.s3.amazonaws.com"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
LOG_PERMISSIONS = ("FULL_CONTROL", "READ", "WRITE")
_URI_GROUPS = ("http://acs.amazonaws.com/groups/global/AllUsers",
               "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
               "http://acs.amazonaws.com/groups/s3/LogDelivery")
DROPPED = Counter("epochfs_access_log_dropped_total", "Server access log records dropped: the buffers were full")
FLUSHED = Counter("epochfs_access_log_objects_total", "Server access log objects written, by outcome", ["outcome"])


# ---------------------------------------------------------------- PutBucketLogging / GetBucketLogging
def _grants(el) -> list[tuple[str, str]]:
    out = []
    for g in el.findall("Grant") if el is not None else []:
        grantee, perm = g.find("Grantee"), (g.findtext("Permission") or "").strip()
        if grantee is None or perm not in LOG_PERMISSIONS:
            raise malformed_xml()
        if grantee.findtext("ID"):
            out.append((f"id:{grantee.findtext('ID').strip()}", perm))
        elif grantee.findtext("URI"):
            uri = grantee.findtext("URI").strip()
            if uri not in _URI_GROUPS:
                raise errors.InvalidInput(f"Invalid group uri {uri!r}")
            out.append((f"uri:{uri}", perm))
        elif grantee.findtext("EmailAddress"):
            out.append((f"email:{grantee.findtext('EmailAddress').strip()}", perm))
        else:
            raise malformed_xml()
    if len(out) > 100:
        raise malformed_xml()
    return out


def parse_logging(body: bytes) -> LoggingTarget | None:
    """A BucketLoggingStatus document: its target, or None (logging off)."""
    root = xml.parse(body)
    if root.tag != "BucketLoggingStatus":
        raise malformed_xml()
    le = root.find("LoggingEnabled")
    if le is None:
        return None
    target = (le.findtext("TargetBucket") or "").strip()
    if not target or le.find("TargetPrefix") is None:
        raise malformed_xml()
    kf = "simple"
    fmt = le.find("TargetObjectKeyFormat")
    if fmt is not None:
        pp = fmt.find("PartitionedPrefix")
        if pp is not None:
            src = (pp.findtext("PartitionDateSource") or "EventTime").strip()
            if src not in ("EventTime", "DeliveryTime") or fmt.find("SimplePrefix") is not None:
                raise malformed_xml()
            kf = f"partitioned:{src}"
        elif fmt.find("SimplePrefix") is None:
            raise malformed_xml()
    return LoggingTarget(bucket=target, prefix=le.findtext("TargetPrefix") or "", grants=_grants(
        le.find("TargetGrants")), key_format=kf)


def _logging_xml(ctx, t: LoggingTarget | None) -> bytes:
    if t is None:
        return xml.doc("BucketLoggingStatus", "")
    grants = ""
    for grantee, perm in t.grants:
        kind, _, val = grantee.partition(":")
        if kind == "id":
            g = (f'<Grantee xmlns:xsi="{XSI}" xsi:type="CanonicalUser"><ID>{xml.esc(val)}</ID>'
                 f"<DisplayName>{xml.esc(ctx.display_name(val))}</DisplayName></Grantee>")
        elif kind == "uri":
            g = f'<Grantee xmlns:xsi="{XSI}" xsi:type="Group"><URI>{xml.esc(val)}</URI></Grantee>'
        else:
            g = (f'<Grantee xmlns:xsi="{XSI}" xsi:type="AmazonCustomerByEmail"><EmailAddress>{xml.esc(val)}'
                 f"</EmailAddress></Grantee>")
        grants += f"<Grant>{g}<Permission>{perm}</Permission></Grant>"
    fmt = "<SimplePrefix></SimplePrefix>" if t.key_format == "simple" else \
        f"<PartitionedPrefix><PartitionDateSource>{t.key_format.split(':', 1)[1]}</PartitionDateSource>" \
        f"</PartitionedPrefix>"
    inner = (f"<TargetBucket>{xml.esc(t.bucket)}</TargetBucket><TargetPrefix>{xml.esc(t.prefix)}</TargetPrefix>"
             + (f"<TargetGrants>{grants}</TargetGrants>" if grants else "")
             + f"<TargetObjectKeyFormat>{fmt}</TargetObjectKeyFormat>")
    return xml.doc("BucketLoggingStatus", f"<LoggingEnabled>{inner}</LoggingEnabled>")


def delivery_allowed(target: BucketRecord, source: str, source_owner: str, prefix: str) -> bool:
    """May the logging service write source bucket `source`'s logs under `prefix` into `target` (the module doc)?"""
    if target.policy:
        rc = policy.RequestContext(policy.Caller(service=LOGGING_SERVICE), "s3:PutObject",
                                   policy.arn(target.name, prefix),
                                   {"aws:sourcearn": policy.arn(source), "aws:sourceaccount": source_owner,
                                    "s3:resourceaccount": target.owner, "aws:principaltype": "Service"})
        verdict = policy.evaluate(parsed_policy(target.policy), rc)
        if verdict is not None:
            return verdict == "Allow"
    return target.owner == source_owner and log_delivery_granted(target)


async def check_target(ctx, source: BucketRecord, t: LoggingTarget) -> None:
    """AWS's rules for a target bucket: it exists, the logging service may write into it (delivery_allowed), and it
    has no default object-lock retention (log objects could not be cleaned up)."""
    try:
        target = await ctx.bucket(t.bucket)
    except errors.NoSuchBucket:
        raise errors.InvalidLoggingTarget("The target bucket for logging does not exist",
                                          bucket_name=t.bucket) from None
    if not delivery_allowed(target, source.name, source.owner, t.prefix):
        raise errors.InvalidLoggingTarget(
            "You must either provide the necessary permissions to the logging service using a bucket policy or "
            "give the log-delivery group WRITE and READ_ACP permissions to the target bucket", bucket_name=t.bucket)
    if target.object_lock is not None and target.object_lock.rule is not None:
        raise errors.InvalidLoggingTarget("The target bucket for logging must not have a default object lock "
                                          "retention period", bucket_name=t.bucket)


async def get_logging(ctx, req):
    info = await bucket_access(ctx, req)
    return Response(200, [("content-type", "application/xml")], _logging_xml(ctx, info.logging))


async def put_logging(ctx, req):
    info = await bucket_access(ctx, req)
    target = parse_logging(await read_document(req))
    if target is not None:
        await check_target(ctx, info, target)
    await ctx.cluster.namenode.bucket_logging(req.bucket, target)
    ctx.forget_bucket(req.bucket)
    return Response(200)


def route(req):
    h = {"GET": get_logging, "PUT": put_logging}.get(req.method)
    if h is None:
        raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")
    return h


# ---------------------------------------------------------------- records
def _q(v: str | None) -> str:
    """A field that may hold spaces, quoted as AWS does; "-" when empty."""
    return f'"{v}"' if v else "-"


_OP_NAMES = {
    "GetObject": "REST.GET.OBJECT", "HeadObject": "REST.HEAD.OBJECT", "PutObject": "REST.PUT.OBJECT",
    "CopyObject": "REST.COPY.OBJECT", "DeleteObject": "REST.DELETE.OBJECT", "DeleteObjects":
    "REST.POST.MULTI_OBJECT_DELETE", "ListObjects": "REST.GET.BUCKET", "ListObjectsV2": "REST.GET.BUCKET",
    "ListObjectVersions": "REST.GET.BUCKETVERSIONS", "CreateMultipartUpload": "REST.POST.UPLOADS",
    "UploadPart": "REST.PUT.PART", "UploadPartCopy": "REST.COPY.PART", "CompleteMultipartUpload":
    "REST.POST.UPLOAD", "AbortMultipartUpload": "REST.DELETE.UPLOAD", "ListParts": "REST.GET.UPLOAD",
    "HeadBucket": "REST.HEAD.BUCKET", "PostObject": "REST.POST.OBJECT",
    # the names S3's own logs use for configuration calls
    "GetBucketAcl": "REST.GET.ACL", "PutBucketAcl": "REST.PUT.ACL", "GetObjectAcl": "REST.GET.ACL",
    "PutObjectAcl": "REST.PUT.ACL", "GetBucketLocation": "REST.GET.LOCATION", "GetBucketVersioning":
    "REST.GET.VERSIONING", "PutBucketVersioning": "REST.PUT.VERSIONING", "GetBucketLogging": "REST.GET.LOGGING_STATUS",
    "PutBucketLogging": "REST.PUT.LOGGING_STATUS", "GetBucketPolicy": "REST.GET.BUCKETPOLICY", "PutBucketPolicy":
    "REST.PUT.BUCKETPOLICY", "DeleteBucketPolicy": "REST.DELETE.BUCKETPOLICY", "GetBucketTagging": "REST.GET.TAGGING",
    "PutBucketTagging": "REST.PUT.TAGGING", "DeleteBucketTagging": "REST.DELETE.TAGGING",
    "GetBucketEncryption": "REST.GET.ENCRYPTION", "PutBucketEncryption": "REST.PUT.ENCRYPTION",
    "DeleteBucketEncryption": "REST.DELETE.ENCRYPTION", "GetBucketLifecycleConfiguration": "REST.GET.LIFECYCLE",
    "PutBucketLifecycleConfiguration": "REST.PUT.LIFECYCLE", "DeleteBucketLifecycle": "REST.DELETE.LIFECYCLE",
    "GetBucketCors": "REST.GET.CORS", "PutBucketCors": "REST.PUT.CORS", "DeleteBucketCors": "REST.DELETE.CORS",
    "ListMultipartUploads": "REST.GET.UPLOADS",
}


def log_operation(method: str, s3_op: str) -> str:
    """AWS's operation field (REST.PUT.OBJECT, ...) for an S3 operation name (gateway/metrics.py's)."""
    name = _OP_NAMES.get(s3_op)
    if name is not None:
        return name
    resource = s3_op
    for verb in ("Get", "Put", "Delete", "Head", "List", "Post"):
        if resource.startswith(verb):
            resource = resource[len(verb):]
            break
    resource = "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(resource)).upper()
    return f"REST.{method}.{resource or 'UNKNOWN'}"


def record_line(*, owner: str, bucket: str, when: float, remote_ip: str, requester: str, request_id: str,
                operation: str, key: str | None, request_uri: str, status: int, error_code: str | None,
                bytes_sent: int, object_size: int | None, total_ms: int, referer: str | None,
                user_agent: str | None, version_id: str | None, sig_version: str | None, auth_type: str | None,
                host: str | None, acl_required: bool = False) -> str:
    """One record in AWS's server access log format (26 fields, space-separated)."""
    t = dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("[%d/%b/%Y:%H:%M:%S +0000]")
    fields = [owner or "-", bucket, t, remote_ip or "-", requester or "-", request_id, operation,
              quote(key, safe="/") if key else "-", _q(request_uri), str(status), error_code or "-", str(bytes_sent) if bytes_sent else "-",
              str(object_size) if object_size else "-", str(total_ms), "-", _q(referer), _q(user_agent),
              version_id or "-", request_id, sig_version or "-", "-", auth_type or "-", host or "-", "-", "-",
              "Yes" if acl_required else "-"]
    return " ".join(fields)


# ---------------------------------------------------------------- the flusher
@dataclass
class _Buffer:
    target: LoggingTarget
    source: str  # the source bucket (the one a partitioned key names)
    source_owner: str
    owner: str  # the target bucket's owner (the log objects' owner)
    started: float
    lines: list[tuple[str, str, str]] = field(default_factory=list)  # (source bucket, its owner, record)
    size: int = 0


def _group(source: str, t: LoggingTarget) -> tuple:
    """The buffer a record goes to: one per target bucket, prefix, key format and grants; per source bucket too
    when the key format names it (partitioned)."""
    return (t.bucket, t.prefix, t.key_format, tuple(tuple(g) for g in t.grants),
            None if t.key_format == "simple" else source)


class AccessLogFlusher(Worker):
    """Buffers records and writes each buffer as one log object (see the module doc)."""

    def __init__(self, ctx, *, flush_s: float = 60.0, idle_s: float = 300.0, flush_bytes: int = 1 << 20,
                 max_bytes: int = 16 << 20, clock=time.time) -> None:
        self.ctx = ctx
        self.flush_s, self.flush_bytes, self.max_bytes = flush_s, flush_bytes, max_bytes
        self.idle_s = max(idle_s, flush_s)
        self.interval_s = min(1.0, max(flush_s / 4, 0.05))
        self._clock = clock
        self._buffers: dict[tuple, _Buffer] = {}
        self._total = 0
        self._tag = os.urandom(4).hex().upper()
        self._seq = 0

    def add(self, source: str, source_owner: str, target: LoggingTarget, target_owner: str, line: str) -> None:
        n = len(line) + 1
        if self._total + n > self.max_bytes:
            DROPPED.inc()
            return
        k = _group(source, target)
        buf = self._buffers.get(k)
        if buf is None:
            buf = self._buffers[k] = _Buffer(target, source, source_owner, target_owner, self._clock())
        buf.lines.append((source, source_owner, line))
        buf.size += n
        self._total += n

    def pending(self) -> int:
        """Bytes of records buffered, not yet written."""
        return self._total

    def _key(self, buf: _Buffer, now: float) -> str:
        self._seq += 1
        unique = f"{self._tag}{self._seq:08X}"
        t = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        stamp = t.strftime("%Y-%m-%d-%H-%M-%S")
        if buf.target.key_format == "simple":
            return f"{buf.target.prefix}{stamp}-{unique}"
        src = dt.datetime.fromtimestamp(buf.started, dt.timezone.utc) \
            if buf.target.key_format.endswith("EventTime") else t
        return (f"{buf.target.prefix}{buf.source_owner}/{self.ctx.settings.region}/{buf.source}/"
                f"{src:%Y}/{src:%m}/{src:%d}/{stamp}-{unique}")

    async def roll(self, source: str, target: LoggingTarget) -> None:
        """A record for `source` is about to go to `target`: write the buffer it would join first if that buffer is
        GW_ACCESS_LOG_FLUSH_S old or full (so a request made after that time finds the earlier ones delivered)."""
        buf = self._buffers.get(_group(source, target))
        now = self._clock()
        if buf is not None and (now - buf.started >= self.flush_s or buf.size >= self.flush_bytes):
            await self._deliver(_group(source, target), now)

    async def run_once(self, force: bool = False) -> PassStats:
        """Write every buffer that is full or GW_ACCESS_LOG_IDLE_S old (all of them with `force`)."""
        stats = PassStats()
        now = self._clock()
        due = [k for k, b in self._buffers.items()
               if force or b.size >= self.flush_bytes or now - b.started >= self.idle_s]
        for k in due:
            if await self._deliver(k, now):
                stats.ok += 1
            else:
                stats.failed += 1
        return stats

    async def _deliver(self, k: tuple, now: float) -> bool:
        buf = self._buffers.pop(k, None)
        if buf is None:
            return True
        self._total -= buf.size
        try:
            await self._write(buf, now)
            FLUSHED.labels("ok").inc()
            return True
        except Exception as e:  # the target went away, the cluster is down: these records are lost
            FLUSHED.labels("failed").inc()
            log.warning("access log delivery failed", extra={"bucket": buf.source, "target": buf.target.bucket,
                                                             "records": len(buf.lines), "reason": repr(e)})
            return False

    async def _acl(self, buf: _Buffer):
        """The log object's ACL: the target owner's full control and the configuration's TargetGrants."""
        if not buf.target.grants:
            return "private"
        acl, emails = [(f"id:{buf.owner}", "FULL_CONTROL")], None
        for grantee, perm in buf.target.grants:
            if grantee.startswith("email:"):
                if emails is None:
                    emails = {e.lower(): oid for oid, e in (await self.ctx.canonical_ids()).items() if e}
                oid = emails.get(grantee[6:].lower())
                if oid is None:
                    continue  # that user is gone
                grantee = f"id:{oid}"
            acl.append((grantee, perm))
        return acl

    async def _write(self, buf: _Buffer, now: float) -> None:
        target = await self.ctx.bucket(buf.target.bucket)
        allowed: dict[tuple[str, str], bool] = {}
        lines = []
        for source, source_owner, line in buf.lines:
            ok = allowed.get((source, source_owner))
            if ok is None:
                ok = allowed[(source, source_owner)] = delivery_allowed(target, source, source_owner,
                                                                        buf.target.prefix)
            if ok:
                lines.append(line)
        if len(lines) < len(buf.lines):
            DROPPED.inc(len(buf.lines) - len(lines))
            log.warning("access log records refused by the target bucket", extra={
                "target": buf.target.bucket, "records": len(buf.lines) - len(lines),
                "sources": sorted(s for (s, _), ok in allowed.items() if not ok)})
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        cluster = self.ctx.cluster

        async def one():
            yield data

        md5 = hashlib.md5(data)
        acl = await self._acl(buf)
        blocks, size = await cluster.write_stream(buf.target.bucket, one(), lambda _: None)
        try:
            obj = ObjectRecord(content_type="text/plain", owner=buf.owner, size=size, etag=f'"{md5.hexdigest()}"',
                               acl=acl)
            await cluster.commit(buf.target.bucket, cluster.namenode.put_object(
                buf.target.bucket, self._key(buf, now), obj, blocks))
        except BaseException:
            await self.ctx.abandon(blocks)
            raise


async def _logging_of(ctx, req, resp) -> tuple[BucketRecord, LoggingTarget] | None:
    """The source bucket's record and its logging target, if the request's bucket has logging on (the bucket
    record is this gateway's cached one, so a change takes effect within its cache time)."""
    if resp.status == 404 and isinstance(resp.body, bytes) and b"<Code>NoSuchBucket<" in resp.body:
        return None  # nothing to log to, and no NameNode lookup for each request to a missing bucket
    try:
        info = await ctx.bucket(req.bucket)
    except errors.DomainError:
        return None
    return None if info.logging is None else (info, info.logging)


async def before_answer(ctx, req, resp) -> None:
    """Before a request to a bucket is answered: roll the buffer its record will join, if that one is due."""
    got = await _logging_of(ctx, req, resp)
    if got is not None:
        await ctx.access_logs.roll(req.bucket, got[1])


async def observe(ctx, req, resp, s3_op: str, started: float, seconds: float, client) -> None:
    """After a request to a bucket: its record, if the bucket has logging on."""
    got = await _logging_of(ctx, req, resp)
    if got is None:
        return
    info, t = got
    try:
        target_owner = (await ctx.bucket(t.bucket)).owner
    except errors.DomainError:
        return  # the target bucket is gone: nothing to deliver to
    h = req.headers
    qs = "&".join(f"{k}={v}" if v else k for k, v in req.query_list)
    uri = f"{req.method} {req.raw_path.decode('latin-1')}{'?' + qs if qs else ''} HTTP/1.1"
    err = None
    if resp.status >= 300 and isinstance(resp.body, (bytes, bytearray)) and b"<Code>" in resp.body:
        err = bytes(resp.body).split(b"<Code>", 1)[1].split(b"</Code>", 1)[0].decode("latin-1")
    sent = resp.length if resp.length is not None else \
        len(resp.body) if isinstance(resp.body, (bytes, bytearray, memoryview)) else 0
    vid = next((v for k, v in resp.headers if k == "x-amz-version-id"), None) or req.query.get("versionId")
    auth = h.get("authorization", "")
    sig = "SigV4" if auth.startswith("AWS4") or "X-Amz-Signature" in req.query else \
        "SigV2" if auth.startswith("AWS ") or "Signature" in req.query else None
    auth_type = "AuthHeader" if auth else "QueryString" if sig else None
    size = None
    if req.method == "PUT" and req.key is not None:
        n = h.get("x-amz-decoded-content-length") or h.get("content-length")
        size = int(n) if n and n.isdigit() else None
    elif req.method in ("GET", "HEAD") and req.key is not None and resp.status < 300:
        size = sent
    line = record_line(owner=info.owner, bucket=req.bucket, when=started, remote_ip=client[0] if client else "",
                       requester=req.user.owner_id if req.auth is not None else "", request_id=req.request_id,
                       operation=log_operation(req.method, s3_op), key=req.key, request_uri=uri,
                       status=resp.status, error_code=err, bytes_sent=0 if req.method == "HEAD" else sent,
                       object_size=size, total_ms=int(seconds * 1000), referer=h.get("referer"),
                       user_agent=h.get("user-agent"), version_id=vid, sig_version=sig, auth_type=auth_type,
                       host=h.get("host"), acl_required=req.acl_required)
    ctx.access_logs.add(req.bucket, info.owner, t, target_owner, line)
    for key, vid, status, code in req.deleted or ():  # a multi-object delete: one record per key, as S3 logs it
        ctx.access_logs.add(req.bucket, info.owner, t, target_owner, record_line(
            owner=info.owner, bucket=req.bucket, when=started, remote_ip=client[0] if client else "",
            requester=req.user.owner_id if req.auth is not None else "", request_id=req.request_id,
            operation="BATCH.DELETE.OBJECT", key=key, request_uri=uri, status=status, error_code=code,
            bytes_sent=0, object_size=None, total_ms=int(seconds * 1000), referer=h.get("referer"),
            user_agent=h.get("user-agent"), version_id=vid, sig_version=sig, auth_type=auth_type,
            host=h.get("host"), acl_required=req.acl_required))
