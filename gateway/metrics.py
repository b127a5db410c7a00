"""The gateway's S3 metrics, per S3 operation (GetObject, PutObject, ...), and the optional access log.

The operation is named from the handler the router picked, so it costs a dict lookup per request. The same
counters feed the admin API's summary (the dashboard's throughput chart).
"""
from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram

from epochfs.common.metrics import series

S3_REQUESTS = Counter("epochfs_s3_requests_total", "S3 requests", ["operation", "status"])
S3_LATENCY = Histogram("epochfs_s3_request_seconds", "S3 request latency", ["operation"],
                       buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
S3_BYTES_IN = Counter("epochfs_s3_received_bytes_total", "Object bytes received by successful S3 requests",
                      ["operation"])
S3_BYTES_OUT = Counter("epochfs_s3_sent_bytes_total", "Body bytes sent in S3 responses", ["operation"])

access_log = logging.getLogger("epochfs.access")

# (module, function) -> S3 operation, where the handler's name alone doesn't say it
_NAMES = {
    ("bucket", "get_acl"): "GetBucketAcl", ("bucket", "put_acl"): "PutBucketAcl",
    ("bucket", "get_location"): "GetBucketLocation", ("bucket", "get_versioning"): "GetBucketVersioning",
    ("bucket", "put_versioning"): "PutBucketVersioning", ("objects", "get_acl"): "GetObjectAcl",
    ("objects", "put_acl"): "PutObjectAcl", ("listing", "list_objects_v1"): "ListObjects",
    ("listing", "list_objects_v2"): "ListObjectsV2", ("listing", "list_versions"): "ListObjectVersions",
    ("multipart", "create"): "CreateMultipartUpload", ("multipart", "complete"): "CompleteMultipartUpload",
    ("multipart", "abort"): "AbortMultipartUpload", ("multipart", "list_uploads"): "ListMultipartUploads",
    ("cors", "preflight"): "PreflightRequest", ("cors", "get_cors"): "GetBucketCors",
    ("cors", "put_cors"): "PutBucketCors", ("cors", "delete_cors"): "DeleteBucketCors",
    ("objectlock", "get_lock_config"): "GetObjectLockConfiguration",
    ("objectlock", "put_lock_config"): "PutObjectLockConfiguration",
    ("bucket_logging", "get_logging"): "GetBucketLogging", ("bucket_logging", "put_logging"): "PutBucketLogging",
    ("bucket", "get_policy"): "GetBucketPolicy", ("bucket", "put_policy"): "PutBucketPolicy",
    ("bucket", "delete_policy"): "DeleteBucketPolicy", ("bucket", "get_policy_status"): "GetBucketPolicyStatus",
    ("bucket", "get_ownership"): "GetBucketOwnershipControls", ("bucket", "put_ownership"): "PutBucketOwnershipControls",
    ("bucket", "delete_ownership"): "DeleteBucketOwnershipControls",
    ("objectlock", "get_legal_hold"): "GetObjectLegalHold", ("objectlock", "put_legal_hold"): "PutObjectLegalHold",
    ("objectlock", "get_retention"): "GetObjectRetention", ("objectlock", "put_retention"): "PutObjectRetention",
    ("sse", "get_encryption"): "GetBucketEncryption", ("sse", "put_encryption"): "PutBucketEncryption",
    ("sse", "delete_encryption"): "DeleteBucketEncryption",
    ("lifecycle", "get_lifecycle"): "GetBucketLifecycleConfiguration",
    ("lifecycle", "put_lifecycle"): "PutBucketLifecycleConfiguration",
    ("lifecycle", "delete_lifecycle"): "DeleteBucketLifecycle", ("post", "post_object"): "PostObject",
}
_CACHE: dict[object, str] = {}


def operation(handler) -> str:
    if handler is None:
        return "Invalid"  # the request failed before it could be routed (bad URI, signature...)
    name = _CACHE.get(handler)
    if name is None:
        mod = handler.__module__.rpartition(".")[2]
        fn = handler.__name__
        name = _NAMES.get((mod, fn)) or "".join(w.capitalize() for w in fn.split("_"))
        if mod not in ("bucket", "objects", "listing", "multipart", "cors", "attributes", "objectlock",
                       "bucket_logging", "tagging", "sse", "lifecycle", "post"):
            name = "Epochfs" + name  # /_epochfs extensions
        _CACHE[handler] = name
    return name


class S3Metrics:
    def __init__(self, access_log_enabled: bool = False) -> None:
        self.access_log = access_log_enabled

    def observe(self, req, resp, seconds: float, handler=None) -> None:
        op = operation(handler)
        series(S3_REQUESTS, op, resp.status).inc()
        series(S3_LATENCY, op).observe(seconds)
        if req is None:
            return
        if resp.status < 300:
            n_in = req.headers.get("x-amz-decoded-content-length") or req.headers.get("content-length")
            if n_in and n_in != "0" and n_in.isdigit():
                series(S3_BYTES_IN, op).inc(int(n_in))
            if req.method != "HEAD":
                n_out = resp.length if resp.length is not None else _len(resp.body)
                if n_out:
                    series(S3_BYTES_OUT, op).inc(n_out)
        if self.access_log:
            access_log.info("s3 request", extra={
                "rid": req.request_id, "op": op, "status": resp.status, "bucket": req.bucket or "",
                "key": req.key or "", "user": req.user.access_key or "-", "ms": round(seconds * 1000, 3)})


def _len(body) -> int:
    return len(body) if isinstance(body, (bytes, bytearray, memoryview)) else 0


def totals() -> dict:
    """Cumulative requests and bytes of this gateway (the dashboard turns two readings into rates)."""
    out = {"requests": 0.0, "errors": 0.0, "bytes_in": 0.0, "bytes_out": 0.0}
    for metric, field in ((S3_REQUESTS, "requests"), (S3_BYTES_IN, "bytes_in"), (S3_BYTES_OUT, "bytes_out")):
        for fam in metric.collect():
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out[field] += s.value
                    if field == "requests" and s.labels.get("status", "2")[0] in "45":
                        out["errors"] += s.value
    return out
