"""The S3 API as a lean ASGI app: parse, authenticate, dispatch on (method, level, sub-resource), answer.

FastAPI's routing measured 2.3x the cost of a raw ASGI route for a 128 KiB object, and S3 dispatches on query
sub-resources that path routing can't express, so the data path stays on this router; FastAPI serves /admin, /metrics.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote_to_bytes

from epochfs.common import errors

from . import (attributes, batch, bucket, bucket_logging, cors, direct, ext, ingest, lifecycle, listing, multipart,
               objectlock, objects, posix, post, sse, tagging)
from ..keys import access_key_of
from ..metrics import operation
from .access import ANONYMOUS
from .body import ClientDisconnected
from .errors import S3Error, error_xml, from_domain, not_implemented
from .http import Response
from .sigv4 import AuthResult, User

log = logging.getLogger("epochfs.s3")
# answers that are part of normal operation (existence checks, conditional reads) are not logged
_QUIET_ERRORS = frozenset(("NoSuchKey", "NoSuchVersion", "NotModified", "PreconditionFailed"))


@dataclass(slots=True)
class S3Request:
    method: str
    bucket: str | None
    key: str | None
    query: dict[str, str]
    query_list: list[tuple[str, str]]
    headers: dict[str, str]
    raw_path: bytes
    receive: object
    request_id: str
    auth: AuthResult | None = None
    vhost: bool = False
    """Addressed virtual-host style (the bucket came from the Host header)."""
    client_ip: str = ""
    secure: bool = False
    """Came over TLS (aws:SecureTransport)."""
    action: str | None = None
    """The S3 action a bucket policy sees ("s3:GetObject"), set once the request is routed."""

    @property
    def user(self) -> User:
        return self.auth.user if self.auth is not None else ANONYMOUS

    @property
    def resource(self) -> str:
        if self.bucket is None:
            return "/"
        return f"/{self.bucket}" + (f"/{self.key}" if self.key is not None else "")


_BUCKET_GET = {"location": bucket.get_location, "versioning": bucket.get_versioning, "acl": bucket.get_acl,
               "uploads": multipart.list_uploads, "versions": listing.list_versions}


def route(req: S3Request):
    m, q = req.method, req.query
    if m == "OPTIONS":
        return cors.preflight
    if req.bucket == ext.EXT_BUCKET:
        return ext.resolve(req)
    if req.bucket is None:
        if m in ("GET", "HEAD"):
            return bucket.list_buckets
        raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")
    if req.key is None:
        if "cors" in q:
            h = {"GET": cors.get_cors, "PUT": cors.put_cors, "DELETE": cors.delete_cors}.get(m)
            return h if h is not None else _not_allowed()
        if "object-lock" in q:
            return objectlock.bucket_route(req)
        if "logging" in q:
            return bucket_logging.route(req)
        for sub, table in _BUCKET_SUBRESOURCES.items():
            if sub in q:
                h = table.get(m)
                return h if h is not None else _not_allowed()
        if "ownershipControls" in q:
            h = {"GET": bucket.get_ownership, "PUT": bucket.put_ownership, "DELETE": bucket.delete_ownership}.get(m)
            return h if h is not None else _not_allowed()
        if m == "GET" or m == "HEAD" and q:
            for sub, h in _BUCKET_GET.items():
                if sub in q:
                    return h
            for sub in ("website", "logging", "notification",
                        "replication", "object-lock",
                        "requestPayment", "accelerate", "analytics", "metrics", "inventory",
                        "intelligent-tiering"):
                if sub in q:
                    raise not_implemented(f"Bucket {sub}")
            return listing.list_objects_v2 if q.get("list-type") == "2" else listing.list_objects_v1
        if m == "HEAD":
            return bucket.head_bucket
        if m == "PUT":
            if "acl" in q:
                return bucket.put_acl
            if "versioning" in q:
                return bucket.put_versioning
            if q:
                raise not_implemented(f"PUT Bucket ?{next(iter(q))}")
            return bucket.create_bucket
        if m == "DELETE":
            if q:
                raise not_implemented(f"DELETE Bucket ?{next(iter(q))}")
            return bucket.delete_bucket
        if m == "POST":
            if "delete" in q:
                return objects.delete_objects
            return post.post_object
        raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")
    if "retention" in q or "legal-hold" in q:
        return objectlock.object_route(req)
    if m == "GET":
        if "uploadId" in q:
            return multipart.list_parts
        if "acl" in q:
            return objects.get_acl
        if "attributes" in q:
            return attributes.get_object_attributes
        if "tagging" in q:
            return tagging.get_object_tagging
        if "retention" in q or "legal-hold" in q or "torrent" in q:
            raise not_implemented("this object sub-resource")
        return objects.get_object
    if m == "HEAD":
        return objects.head_object
    if m == "PUT":
        if "partNumber" in q and "uploadId" in q:
            return multipart.upload_part_copy if "x-amz-copy-source" in req.headers else multipart.upload_part
        if "acl" in q:
            return objects.put_acl
        if "tagging" in q:
            return tagging.put_object_tagging
        if "retention" in q or "legal-hold" in q:
            raise not_implemented("this object sub-resource")
        return objects.copy_object if "x-amz-copy-source" in req.headers else objects.put_object
    if m == "DELETE":
        if "uploadId" in q:
            return multipart.abort
        if "tagging" in q:
            return tagging.delete_object_tagging
        return objects.delete_object
    if m == "POST":
        if "uploads" in q:
            return multipart.create
        if "uploadId" in q:
            return multipart.complete
        raise not_implemented("POST on an object")
    raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")


_BUCKET_SUBRESOURCES = {
    "policy": {"GET": bucket.get_policy, "PUT": bucket.put_policy, "DELETE": bucket.delete_policy},
    "policyStatus": {"GET": bucket.get_policy_status},
    "publicAccessBlock": {"GET": bucket.get_public_access_block, "PUT": bucket.put_public_access_block,
                          "DELETE": bucket.delete_public_access_block},
    "encryption": {"GET": sse.get_encryption, "PUT": sse.put_encryption, "DELETE": sse.delete_encryption},
    "tagging": {"GET": tagging.get_bucket_tagging, "PUT": tagging.put_bucket_tagging,
                "DELETE": tagging.delete_bucket_tagging},
    "lifecycle": {"GET": lifecycle.get_lifecycle, "PUT": lifecycle.put_lifecycle, "DELETE": lifecycle.delete_lifecycle},
}

# the action a bucket policy names for each handler; (plain, with ?versionId) where a version makes a difference
_ACTIONS = {
    bucket.list_buckets: "s3:ListAllMyBuckets", bucket.create_bucket: "s3:CreateBucket",
    bucket.delete_bucket: "s3:DeleteBucket", bucket.head_bucket: "s3:ListBucket",
    bucket.get_location: "s3:GetBucketLocation", bucket.get_versioning: "s3:GetBucketVersioning",
    bucket.put_versioning: "s3:PutBucketVersioning", bucket.get_acl: "s3:GetBucketAcl",
    bucket.put_acl: "s3:PutBucketAcl", bucket.get_ownership: "s3:GetBucketOwnershipControls",
    bucket.put_ownership: "s3:PutBucketOwnershipControls", bucket.delete_ownership: "s3:PutBucketOwnershipControls",
    bucket.get_policy: "s3:GetBucketPolicy", bucket.put_policy: "s3:PutBucketPolicy",
    bucket.delete_policy: "s3:DeleteBucketPolicy", bucket.get_policy_status: "s3:GetBucketPolicyStatus",
    bucket.get_public_access_block: "s3:GetBucketPublicAccessBlock",
    bucket.put_public_access_block: "s3:PutBucketPublicAccessBlock",
    bucket.delete_public_access_block: "s3:PutBucketPublicAccessBlock",
    cors.get_cors: "s3:GetBucketCORS", cors.put_cors: "s3:PutBucketCORS", cors.delete_cors: "s3:PutBucketCORS",
    listing.list_objects_v1: "s3:ListBucket", listing.list_objects_v2: "s3:ListBucket",
    listing.list_versions: "s3:ListBucketVersions", multipart.list_uploads: "s3:ListBucketMultipartUploads",
    objects.delete_objects: "s3:DeleteObject", post.post_object: "s3:PutObject",
    multipart.list_parts: "s3:ListMultipartUploadParts", multipart.create: "s3:PutObject",
    multipart.upload_part: "s3:PutObject", multipart.upload_part_copy: "s3:PutObject",
    multipart.complete: "s3:PutObject", multipart.abort: "s3:AbortMultipartUpload",
    objects.put_object: "s3:PutObject", objects.copy_object: "s3:PutObject",
    objects.get_acl: ("s3:GetObjectAcl", "s3:GetObjectVersionAcl"),
    objects.put_acl: ("s3:PutObjectAcl", "s3:PutObjectVersionAcl"),
    objects.get_object: ("s3:GetObject", "s3:GetObjectVersion"),
    objects.head_object: ("s3:GetObject", "s3:GetObjectVersion"),
    objects.delete_object: ("s3:DeleteObject", "s3:DeleteObjectVersion"),
    attributes.get_object_attributes: ("s3:GetObjectAttributes", "s3:GetObjectVersionAttributes"),
    objectlock.get_lock_config: "s3:GetBucketObjectLockConfiguration",
    objectlock.put_lock_config: "s3:PutBucketObjectLockConfiguration",
    objectlock.get_retention: "s3:GetObjectRetention", objectlock.put_retention: "s3:PutObjectRetention",
    objectlock.get_legal_hold: "s3:GetObjectLegalHold", objectlock.put_legal_hold: "s3:PutObjectLegalHold",
    bucket_logging.get_logging: "s3:GetBucketLogging", bucket_logging.put_logging: "s3:PutBucketLogging",
    sse.get_encryption: "s3:GetEncryptionConfiguration", sse.put_encryption: "s3:PutEncryptionConfiguration",
    sse.delete_encryption: "s3:PutEncryptionConfiguration",
    tagging.get_object_tagging: ("s3:GetObjectTagging", "s3:GetObjectVersionTagging"),
    tagging.put_object_tagging: ("s3:PutObjectTagging", "s3:PutObjectVersionTagging"),
    tagging.delete_object_tagging: ("s3:DeleteObjectTagging", "s3:DeleteObjectVersionTagging"),
    tagging.get_bucket_tagging: "s3:GetBucketTagging", tagging.put_bucket_tagging: "s3:PutBucketTagging",
    tagging.delete_bucket_tagging: "s3:PutBucketTagging",
    lifecycle.get_lifecycle: "s3:GetLifecycleConfiguration", lifecycle.put_lifecycle: "s3:PutLifecycleConfiguration",
    lifecycle.delete_lifecycle: "s3:PutLifecycleConfiguration",
}


def action_of(req: S3Request, handler) -> str | None:
    """The policy action of a routed request (None: the handler names its own, as the epochfs extensions do)."""
    a = _ACTIONS.get(handler) or getattr(handler, "s3_action", None)
    if isinstance(a, tuple):
        return a[1] if "versionId" in req.query else a[0]
    return a


def _not_allowed():
    raise errors.MethodNotAllowed("The specified method is not allowed against this resource.")


def vhost_bucket(host: str | None, domain: str) -> str | None:
    """The bucket a virtual-host-style request names: `bucket` for a Host `bucket.<domain>[:port]`; None (path
    style) for any other Host, for `<domain>` itself, or when no domain is configured (GW_DOMAIN unset), as MinIO,
    Garage and Ceph RGW do: a Host outside the domain is never taken for a bucket."""
    if not domain or not host:
        return None
    h = host.lower()
    if not h.startswith("["):  # an IPv6 literal never ends in the domain
        h = h.rsplit(":", 1)[0]
    h = h.rstrip(".")
    suffix = "." + domain.lower().strip(".")
    return h[:-len(suffix)] if h.endswith(suffix) and len(h) > len(suffix) else None


class S3App:
    """ASGI app for the S3 API. `ctx` carries the cluster client, the users and the settings."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.verifier = ctx.s3_verifier
        self.domain = ctx.settings.domain
        self._rid_prefix = os.urandom(4).hex().upper()
        self._rid = 0

    def _request_id(self) -> str:
        self._rid += 1
        return f"{self._rid_prefix}{self._rid:012X}"

    async def __call__(self, scope, receive, send) -> None:
        rid = self._request_id()
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            name = k.decode("latin-1").lower()
            val = v.decode("latin-1")
            headers[name] = f"{headers[name]},{val}" if name in headers else val
        method = scope["method"]
        raw_path = scope.get("raw_path") or scope["path"].encode()
        req = handler = None
        t0 = time.perf_counter()
        try:
            req = self._parse(method, raw_path, scope.get("query_string", b""), headers, receive, rid)
            client = scope.get("client")
            req.client_ip, req.secure = client[0] if client else "", scope.get("scheme") == "https"
            if method != "OPTIONS":  # CORS preflights carry no credentials
                await self.ctx.keys.load(access_key_of(headers, req.query))
                req.auth = self.verifier.verify(method, raw_path, req.query_list, headers,  # None: anonymous
                                                vhost_bucket=req.bucket if req.vhost else None)
            handler = route(req)
            req.action = action_of(req, handler)
            resp = await handler(self.ctx, req)
        except S3Error as e:
            resp = self._error(e, req, raw_path, rid, method)
        except errors.DomainError as e:
            resp = self._error(from_domain(e), req, raw_path, rid, method)
        except ClientDisconnected:
            log.info("%s %s: client went away mid-request", method, raw_path)
            return
        except Exception:
            log.exception("%s %s failed", method, raw_path)
            resp = self._error(S3Error("InternalError", "We encountered an internal error. Please try again.", 500),
                               req, raw_path, rid, method)
        if resp.status >= 400 and (headers.get("content-length", "0") != "0" or "transfer-encoding" in headers):
            # the body may be unread (a client that sent Expect: 100-continue and got this error never sends it,
            # and botocore then reuses the connection): close it, as S3 does, so the next request isn't misparsed
            resp.headers.append(("connection", "close"))
        if "origin" in headers and req is not None and method != "OPTIONS":
            resp.headers += await cors.actual_request_headers(self.ctx, req)
        seconds = time.perf_counter() - t0
        self.ctx.metrics.observe(req, resp, seconds, handler)
        await self._send(send, resp, rid, method == "HEAD")
        if req is not None and req.bucket is not None and req.bucket != ext.EXT_BUCKET and method != "OPTIONS":
            try:  # server access logging, after the answer is out (bucket_logging.py)
                await bucket_logging.observe(self.ctx, req, resp, operation(handler), time.time() - seconds,
                                             seconds, scope.get("client"))
            except Exception:
                log.exception("access log record failed")

    def _parse(self, method, raw_path: bytes, qs: bytes, headers, receive, rid) -> S3Request:
        try:
            path = unquote_to_bytes(raw_path).decode("utf-8")
        except UnicodeDecodeError:
            raise S3Error("InvalidURI", "Couldn't parse the specified URI.", 400) from None
        try:
            qlist = parse_qsl(qs.decode("utf-8"), keep_blank_values=True, errors="strict")
        except (UnicodeDecodeError, ValueError):
            raise S3Error("InvalidURI", "Couldn't parse the specified URI.", 400) from None
        path = path[1:] if path.startswith("/") else path
        vbucket = vhost_bucket(headers.get("host"), self.domain) if self.domain else None
        if vbucket is not None:  # virtual-host style: the whole path is the key, never a bucket
            bucket_name, key = vbucket, path
        else:
            bucket_name, _, key = path.partition("/")
        return S3Request(method=method, bucket=bucket_name or None, key=key if key else None, query=dict(qlist),
                         query_list=qlist, headers=headers, raw_path=raw_path, receive=receive, request_id=rid,
                         vhost=vbucket is not None)

    def _error(self, e: S3Error, req, raw_path, rid, method) -> Response:
        resource = req.resource if req is not None else raw_path.decode("latin-1")
        if e.code not in _QUIET_ERRORS:  # logged with the RequestId the client sees in the error body
            log.log(logging.WARNING if e.status >= 500 else logging.INFO, "s3 error", extra={
                "rid": rid, "method": method, "resource": resource, "status": e.status, "code": e.code,
                "user": req.user.access_key if req is not None else "", "reason": e.message})
        body = b"" if e.code == "NotModified" else error_xml(e, resource, rid)
        return Response(e.status, [("content-type", "application/xml"), *e.headers], body)

    async def _send(self, send, resp: Response, rid: str, head: bool) -> None:
        hdrs = [(b"x-amz-request-id", rid.encode()), (b"x-amz-id-2", rid.encode()), (b"server", b"epochfs")]
        body = resp.body
        for k, v in resp.headers:
            hdrs.append((k.encode("latin-1"), str(v).encode("latin-1", "replace")))
        streaming = not isinstance(body, (bytes, bytearray, memoryview))
        if not any(k == "content-length" for k, _ in resp.headers):
            n = resp.length if resp.length is not None else None if streaming else len(body)
            if n is not None and resp.status not in (204, 304):
                hdrs.append((b"content-length", str(n).encode()))
        await send({"type": "http.response.start", "status": resp.status, "headers": hdrs})
        if head or resp.status in (204, 304):
            if streaming:
                await body.aclose()
            await send({"type": "http.response.body", "body": b""})
            return
        if not streaming:
            await send({"type": "http.response.body", "body": bytes(body) if isinstance(body, memoryview) else body})
            return
        try:
            async for piece in body:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
        except Exception:
            # headers are gone already: all we can do is cut the connection so the client sees a short body
            log.exception("streaming response failed")
            raise
        await send({"type": "http.response.body", "body": b""})
