"""S3 errors: one table maps domain errors to S3 codes and statuses; S3Error carries codes only the S3 API knows.

Handlers raise domain errors (common/errors.py) wherever one has the meaning: a missing bucket, key or version, an
invalid argument, a failed precondition, a bad digest, a method not allowed, a denied permission. S3Error stays for
what only the S3 protocol knows, with no meaning outside it:
  - authentication and signing: SignatureDoesNotMatch, InvalidAccessKeyId, AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError, RequestTimeTooSkewed, an unsupported Authorization type (InvalidArgument),
    and AccessDenied for an expired or unsigned request or a POST policy's refusal (sigv4.py, ext.py, post.py;
    admin/auth.py turns the verifier's into its own 401);
  - the HTTP and body encoding: InvalidURI, IncompleteBody, MissingContentLength, InvalidDigest (a malformed
    Content-MD5), XAmzContentSHA256Mismatch, InvalidRequest for header combinations, request body too large, NotModified (a 304 without a body), InvalidRange (416 with the object's size);
  - document syntax: MalformedXML, MalformedJSON, MalformedACLError, MalformedPOSTRequest, InvalidPolicyDocument,
    MaxPostPreDataLengthExceeded, and a browser POST that is not multipart/form-data (PreconditionFailed naming
    the encoding, not a condition on the object);
  - S3 features as such: NotImplemented, NoSuchCORSConfiguration, OwnershipControlsNotFoundError, CORS preflight
    answers (BadRequest, AccessForbidden), ACL codes (AccessControlListNotSupported,
    InvalidBucketAclWithObjectOwnership), InvalidStorageClass, MetadataTooLarge, EntityTooLarge/EntityTooSmall of a
    POST policy's content-length-range (they name the policy's bounds).
"""
from __future__ import annotations

from xml.sax.saxutils import escape

from epochfs.common import errors


class S3Error(Exception):
    def __init__(self, code: str, message: str, status: int = 400, **extra) -> None:
        super().__init__(message)
        self.code, self.message, self.status, self.extra = code, message, status, extra
        self.headers: list[tuple[str, str]] = []


S3_ERRORS: dict[type[errors.DomainError], tuple[str, int]] = {
    errors.NoSuchBucket: ("NoSuchBucket", 404),
    errors.NoSuchKey: ("NoSuchKey", 404),
    errors.NoSuchUpload: ("NoSuchUpload", 404),
    errors.NoSuchVersion: ("NoSuchVersion", 404),
    errors.MethodNotAllowed: ("MethodNotAllowed", 405),
    errors.BucketNotEmpty: ("BucketNotEmpty", 409),
    errors.BucketAlreadyOwnedByYou: ("BucketAlreadyOwnedByYou", 409),
    errors.BucketAlreadyExists: ("BucketAlreadyExists", 409),
    errors.InvalidBucketName: ("InvalidBucketName", 400),
    errors.KeyTooLong: ("KeyTooLongError", 400),
    errors.InvalidKey: ("InvalidArgument", 400),
    errors.InvalidPart: ("InvalidPart", 400),
    errors.InvalidPartOrder: ("InvalidPartOrder", 400),
    errors.EntityTooSmall: ("EntityTooSmall", 400),
    errors.PreconditionFailed: ("PreconditionFailed", 412),
    errors.NotEnoughReplicas: ("ServiceUnavailable", 503),
    errors.Unavailable: ("ServiceUnavailable", 503),
    errors.StoreRefused: ("ServiceUnavailable", 503),
    errors.CorruptBlock: ("InternalError", 500),
    errors.InvalidInput: ("InvalidArgument", 400),
    errors.Conflict: ("OperationAborted", 409),
    errors.QuotaExceeded: ("QuotaExceeded", 403),  # no standard S3 code; other S3 stores answer this
    errors.PermissionDenied: ("AccessDenied", 403),
    errors.EmptyPartList: ("MalformedXML", 400),
    errors.ChecksumMismatch: ("BadDigest", 400),
    errors.ChecksumModeMismatch: ("InvalidRequest", 400),
    errors.MalformedPolicy: ("MalformedPolicy", 400),
    errors.EntityTooLarge: ("EntityTooLarge", 400),
    # object lock and bucket logging (objectlock.py, bucket_logging.py); ObjectLocked is AccessDenied (403)
    errors.InvalidBucketState: ("InvalidBucketState", 409),
    errors.ObjectLockNotEnabled: ("InvalidRequest", 400),
    errors.InvalidRetentionPeriod: ("InvalidRetentionPeriod", 400),
    errors.NoObjectLockConfiguration: ("ObjectLockConfigurationNotFoundError", 404),
    errors.NoSuchObjectLockConfiguration: ("NoSuchObjectLockConfiguration", 404),
    errors.InvalidLoggingTarget: ("InvalidTargetBucketForLogging", 400),
    errors.InvalidTag: ("InvalidTag", 400),
    errors.InvalidConfiguration: ("InvalidRequest", 400),
}
# details of a domain error that S3 shows as fields of the error document, in the order they were given
S3_FIELDS: dict[str, str] = {
    "condition": "Condition",            # the header whose condition failed (s3fs: If-None-Match -> exists)
    "argument": "ArgumentName", "value": "ArgumentValue",
    "bucket_name": "BucketName", "key_size": "Size", "max_size": "MaxSizeAllowed",
}


def from_domain(exc: errors.DomainError) -> S3Error:
    for cls in type(exc).__mro__:
        if cls in S3_ERRORS:
            code, status = S3_ERRORS[cls]
            err = S3Error(code, exc.message, status)
            err.extra = {S3_FIELDS[k]: v for k, v in exc.details.items() if k in S3_FIELDS and v is not None}
            if exc.details.get("dm"):  # reading a key whose current version is a delete marker
                err.headers = [("x-amz-delete-marker", "true"), ("x-amz-version-id", exc.details.get("vid", ""))]
            return err
    return S3Error("InternalError", "We encountered an internal error. Please try again.", 500)


def error_xml(err: S3Error, resource: str, request_id: str) -> bytes:
    extra = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in err.extra.items())
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{err.code}</Code>'
            f"<Message>{escape(err.message)}</Message>{extra}<Resource>{escape(resource)}</Resource>"
            f"<RequestId>{request_id}</RequestId><HostId>{request_id}</HostId></Error>").encode()


# shorthands for errors raised by the S3 layer itself
def access_denied(msg: str = "Access Denied") -> S3Error:
    return S3Error("AccessDenied", msg, 403)


def invalid_request(msg: str) -> S3Error:
    return S3Error("InvalidRequest", msg, 400)


def malformed_xml() -> S3Error:
    return S3Error("MalformedXML", "The XML you provided was not well-formed or did not validate against our "
                   "published schema.", 400)


def not_implemented(what: str) -> S3Error:
    return S3Error("NotImplemented", f"{what} is not implemented", 501)
