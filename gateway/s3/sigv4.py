"""AWS Signature Version 4: Authorization headers, presigned URLs (query auth) and aws-chunked chunk signatures.

Written here rather than taken from a library: botocore only signs (it has no verifier), and the verifying side must
work on the raw request as the ASGI server sees it (raw path, repeated query keys, header whitespace).
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import unquote_to_bytes

from epochfs.common.sigv4 import (EMPTY_SHA256, UNSIGNED, canonical_header_value, canonical_path, canonical_query,
                             canonical_request, scope as make_scope, sign, signing_key, string_to_sign)
from .errors import S3Error, access_denied

STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"


@dataclass(frozen=True, slots=True)
class User:
    access_key: str
    secret_key: str
    owner_id: str
    display_name: str
    admin: bool = False
    buckets: dict | None = None
    """Per-bucket permissions ("read" | "write" | "owner") of a key made through the admin API; None for GW_USERS."""
    email: str = ""
    """The e-mail address ACL grants by `emailAddress` resolve to this user (GW_USERS' fifth field)."""


def parse_users(spec: str) -> list[User]:
    users = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        parts = item.split(":")
        if len(parts) < 2:
            raise ValueError(f"bad user spec {item!r}: want ACCESS:SECRET[:OWNER_ID[:DISPLAY_NAME[:EMAIL]]]")
        ak, sk = parts[0], parts[1]
        oid = parts[2] if len(parts) > 2 and parts[2] else hashlib.sha256(ak.encode()).hexdigest()
        name = parts[3] if len(parts) > 3 and parts[3] else ak
        email = parts[4] if len(parts) > 4 else ""
        users.append(User(ak, sk, oid, name, email=email))
    return users


@dataclass(slots=True)
class AuthResult:
    user: User
    payload_hash: str  # hex sha256, UNSIGNED-PAYLOAD, or one of the STREAMING-* values
    signature: str
    amz_date: str
    scope: str
    signing_key: bytes


class SigV4Verifier:
    def __init__(self, users: dict[str, User], *, max_skew_s: int = 900) -> None:
        self.users = users
        self.max_skew_s = max_skew_s

    @staticmethod
    def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
        return signing_key(secret, date, region, service)

    def _verify_v2(self, method, raw_path, query, headers, access_key: str, signature: str, expires: str | None,
                   now: dt.datetime) -> AuthResult:
        """Signature Version 2 (HMAC-SHA1), which boto3 still uses for presigned URLs unless told otherwise."""
        user = self._user(access_key)
        if expires is not None:  # query string auth
            try:
                exp = int(expires)
            except ValueError:
                raise access_denied("Invalid Expires") from None
            if now.timestamp() > exp:
                raise access_denied("Request has expired")
            date = expires
        else:
            date = "" if "x-amz-date" in headers else headers.get("date", "")
            stamp = headers.get("x-amz-date") or headers.get("date")
            try:
                t = parsedate_to_datetime(stamp)
            except (TypeError, ValueError):
                raise access_denied("AWS authentication requires a valid Date or x-amz-date header") from None
            if abs((now - t).total_seconds()) > self.max_skew_s:
                raise S3Error("RequestTimeTooSkewed",
                              "The difference between the request time and the current time is too large.", 403)
        sts = _v2_string_to_sign(method, raw_path, query, headers, date)
        expected = base64.b64encode(hmac.new(user.secret_key.encode(), sts.encode("utf-8", "surrogateescape"),
                                             hashlib.sha1).digest()).decode()
        if not hmac.compare_digest(expected, signature):
            raise S3Error("SignatureDoesNotMatch", "The request signature we calculated does not match the signature "
                          "you provided. Check your key and signing method.", 403, AWSAccessKeyId=access_key,
                          StringToSign=sts)
        return AuthResult(user, UNSIGNED, signature, "", "", b"")

    def _user(self, access_key: str) -> User:
        u = self.users.get(access_key)
        if u is None:
            raise S3Error("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.",
                          403, AWSAccessKeyId=access_key)
        return u

    def verify(self, method: str, raw_path: bytes, query: list[tuple[str, str]], headers: dict[str, str],
               now: dt.datetime | None = None, *, vhost_bucket: str | None = None) -> AuthResult | None:
        """Verify the request's signature; None for an anonymous request. Raises S3Error on a bad signature.
        `vhost_bucket`: the bucket a virtual-host-style request named in its Host (SigV4 signs the path as sent and
        the Host among the headers; a V2 signature's resource is /bucket/key either way)."""
        now = now or dt.datetime.now(dt.timezone.utc)
        v2_resource = raw_path if vhost_bucket is None else b"/" + vhost_bucket.encode() + raw_path
        auth = headers.get("authorization")
        qd = dict(query)
        if auth is not None:
            if auth.startswith("AWS "):
                akid, _, sig = auth[4:].strip().rpartition(":")
                return self._verify_v2(method, v2_resource, query, headers, akid, sig, None, now)
            if not auth.startswith("AWS4-HMAC-SHA256 "):
                raise S3Error("InvalidArgument", "Unsupported Authorization Type", 400)
            fields = {}
            for item in auth[len("AWS4-HMAC-SHA256 "):].split(","):
                k, _, v = item.strip().partition("=")
                fields[k] = v
            try:
                credential, signed, signature = fields["Credential"], fields["SignedHeaders"], fields["Signature"]
            except KeyError:
                raise S3Error("AuthorizationHeaderMalformed", "The authorization header is malformed.", 400) from None
            amz_date = headers.get("x-amz-date") or ""
            if not amz_date and "date" in headers:
                try:
                    amz_date = parsedate_to_datetime(headers["date"]).strftime("%Y%m%dT%H%M%SZ")
                except (TypeError, ValueError):
                    amz_date = ""
            payload_hash = headers.get("x-amz-content-sha256", "")
            if not payload_hash:
                raise S3Error("InvalidRequest", "Missing required header for this request: x-amz-content-sha256", 400)
            presigned = False
            expires = None
        elif "X-Amz-Algorithm" in qd:
            if qd["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
                raise S3Error("AuthorizationQueryParametersError", "X-Amz-Algorithm only supports AWS4-HMAC-SHA256",
                              400)
            try:
                credential, signed, signature = qd["X-Amz-Credential"], qd["X-Amz-SignedHeaders"], qd["X-Amz-Signature"]
                amz_date, expires = qd["X-Amz-Date"], int(qd["X-Amz-Expires"])
            except (KeyError, ValueError):
                raise S3Error("AuthorizationQueryParametersError",
                              "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
                              "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.",
                              400) from None
            if not 0 < expires <= 604800:
                raise S3Error("AuthorizationQueryParametersError",
                              "X-Amz-Expires must be between 1 second and a week (604800 seconds)", 403)
            payload_hash = headers.get("x-amz-content-sha256", UNSIGNED)
            presigned = True
        elif "AWSAccessKeyId" in qd and "Signature" in qd:
            return self._verify_v2(method, v2_resource, query, headers, qd["AWSAccessKeyId"], qd["Signature"],
                                   qd.get("Expires", ""), now)
        else:
            return None

        cred = credential.split("/")
        if len(cred) != 5 or cred[4] != "aws4_request":
            raise S3Error("AuthorizationHeaderMalformed", f"The credential {credential!r} is malformed.", 400)
        access_key, date, region, service = cred[0], cred[1], cred[2], cred[3]
        user = self._user(access_key)
        try:
            t = parse_amz_date(amz_date)
        except ValueError:
            raise access_denied("AWS authentication requires a valid Date or x-amz-date header") from None
        if presigned:
            if now > t + dt.timedelta(seconds=expires):
                raise access_denied("Request has expired")
            if t - now > dt.timedelta(seconds=self.max_skew_s):
                raise access_denied("Request is not valid yet")
        elif abs((now - t).total_seconds()) > self.max_skew_s:
            raise S3Error("RequestTimeTooSkewed",
                          "The difference between the request time and the current time is too large.", 403)
        if date != amz_date[:8]:
            raise S3Error("SignatureDoesNotMatch", "Credential date does not match x-amz-date", 403)

        names = signed.split(";")
        unsigned = _not_signed(names, headers)
        if unsigned:
            raise S3Error("AccessDenied", "There were headers present in the request which were not signed", 403,
                          HeadersNotSigned=", ".join(unsigned))
        signed_headers = []
        for name in names:
            v = headers.get(name)
            if v is None:
                raise S3Error("SignatureDoesNotMatch", f"signed header {name} is missing", 403)
            # header bytes are read as latin-1; SDKs sign non-ASCII values as their UTF-8 bytes (botocore sends those)
            signed_headers.append((name, v if v.isascii() else v.encode("latin-1").decode("utf-8", "surrogateescape")))
        canon_query = canonical_query(query, skip="X-Amz-Signature" if presigned else None)
        creq, _ = canonical_request(method, canonical_path(_unquote_path(raw_path)), canon_query, signed_headers,
                                    payload_hash)
        scope = make_scope(date, region, service)
        sts = string_to_sign(amz_date, scope, creq)
        key = self.signing_key(user.secret_key, date, region, service)
        expected = sign(key, sts)
        if not hmac.compare_digest(expected, signature):
            raise S3Error("SignatureDoesNotMatch", "The request signature we calculated does not match the signature "
                          "you provided. Check your key and signing method.", 403,
                          AWSAccessKeyId=access_key, StringToSign=sts, CanonicalRequest=creq)
        return AuthResult(user, payload_hash, signature, amz_date, scope, key)


def _not_signed(names: list[str], headers: dict[str, str]) -> list[str]:
    """Headers a SigV4 signature must cover but doesn't: host and every x-amz-* header present (S3 answers 403
    AccessDenied with HeadersNotSigned), except x-amz-content-sha256, which S3 takes unsigned (the payload hash is
    part of the canonical request either way)."""
    signed = set(names)
    missing = [] if "host" in signed else ["host"]
    for name in headers:
        if name.startswith("x-amz-") and name not in signed and name != "x-amz-content-sha256":
            missing.append(name)
    return missing


# Query parameters that are part of a V2 signature's resource (the S3 "sub-resources").
V2_SUBRESOURCES = frozenset((
    "acl", "cors", "delete", "lifecycle", "location", "logging", "notification", "partNumber", "policy",
    "requestPayment", "restore", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning", "versions",
    "website", "response-content-type", "response-content-language", "response-expires", "response-cache-control",
    "response-content-disposition", "response-content-encoding", "object-lock", "retention", "legal-hold",
    "encryption", "replication", "accelerate", "attributes"))


def _v2_string_to_sign(method: str, raw_path: bytes, query, headers: dict[str, str], date: str) -> str:
    amz = {}
    for name, value in headers.items():
        if name.startswith("x-amz-"):
            amz[name] = canonical_header_value(value)
    sub = sorted((k, v) for k, v in query if k in V2_SUBRESOURCES)
    resource = raw_path.decode("latin-1")
    if resource.count("/") == 1 and resource != "/":
        resource += "/"  # a bucket's V2 resource is "/bucket/" whatever the request path looks like
    if sub:
        resource += "?" + "&".join(f"{k}={v}" if v != "" else k for k, v in sub)
    return "\n".join([method, headers.get("content-md5", ""), headers.get("content-type", ""), date]) + "\n" + \
        "".join(f"{k}:{amz[k]}\n" for k in sorted(amz)) + resource


def _unquote_path(raw_path: bytes) -> str:
    return unquote_to_bytes(raw_path).decode("utf-8", "surrogateescape")


class ChunkSigner:
    """Checks the signature chain of STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) bodies."""

    def __init__(self, auth: AuthResult) -> None:
        self.auth = auth
        self.prev = auth.signature

    def check_chunk(self, chunk_sig: str, data_sha256_hex: str) -> None:
        sts = (f"AWS4-HMAC-SHA256-PAYLOAD\n{self.auth.amz_date}\n{self.auth.scope}\n{self.prev}\n"
               f"{EMPTY_SHA256}\n{data_sha256_hex}")
        expected = hmac.new(self.auth.signing_key, sts.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, chunk_sig):
            raise S3Error("SignatureDoesNotMatch", "The chunk signature does not match.", 403)
        self.prev = expected

    def check_trailer(self, trailer_sig: str, trailer_bytes: bytes) -> None:
        sts = (f"AWS4-HMAC-SHA256-TRAILER\n{self.auth.amz_date}\n{self.auth.scope}\n{self.prev}\n"
               f"{hashlib.sha256(trailer_bytes).hexdigest()}")
        expected = hmac.new(self.auth.signing_key, sts.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, trailer_sig):
            raise S3Error("SignatureDoesNotMatch", "The trailer signature does not match.", 403)


def parse_amz_date(s: str) -> dt.datetime:
    """An x-amz-date, YYYYMMDD'T'HHMMSS'Z', as a UTC datetime; ValueError if it isn't one. By hand: strptime (which
    also accepts one-digit fields) took ~6% of the gateway's CPU per request."""
    if len(s) != 16 or s[8] != "T" or s[15] != "Z" or not s.isascii() or not (s[:8] + s[9:15]).isdigit():
        raise ValueError(f"not an x-amz-date: {s!r}")
    return dt.datetime(int(s[:4]), int(s[4:6]), int(s[6:8]), int(s[9:11]), int(s[11:13]), int(s[13:15]),
                       tzinfo=dt.timezone.utc)
