"""SigV4 primitives shared by the signing client (common/client.py) and the gateway's verifier.

Only the pieces both sides compute identically live here: signing-key derivation (cached), URI/query encoding, the
canonical request and the string to sign. Parsing Authorization headers and presigned URLs stays in the gateway.
"""
from __future__ import annotations

import hashlib
import hmac
import re
from functools import lru_cache
from urllib.parse import quote

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
_SPACES = re.compile(r"\s+")


def uri_encode(s: str, safe: str = "-_.~") -> str:
    """S3's URI encoding: everything but unreserved characters (and `safe`) percent-encoded as UTF-8."""
    return quote(s, safe=safe)


def canonical_path(path: str) -> str:
    """The canonical URI of an (unquoted) S3 path: each segment encoded, slashes kept."""
    return uri_encode(path, safe="/-_.~")


def canonical_query(pairs, skip: str | None = None) -> str:
    return "&".join(sorted(f"{uri_encode(k)}={uri_encode(v)}" for k, v in pairs if k != skip))


def canonical_header_value(value: str) -> str:
    return _SPACES.sub(" ", value.strip())


def canonical_request(method: str, canon_uri: str, canon_query: str, headers: list[tuple[str, str]],
                      payload_hash: str) -> tuple[str, str]:
    """(canonical request, signed header list) for lower-case header names in signing order."""
    signed = ";".join(name for name, _ in headers)
    canon_headers = "".join(f"{name}:{canonical_header_value(v)}\n" for name, v in headers)
    return "\n".join([method, canon_uri, canon_query, canon_headers, signed, payload_hash]), signed


def scope(date: str, region: str, service: str) -> str:
    return f"{date}/{region}/{service}/aws4_request"


def string_to_sign(amz_date: str, scope_: str, creq: str) -> str:
    return f"{ALGORITHM}\n{amz_date}\n{scope_}\n{hashlib.sha256(creq.encode('utf-8', 'surrogateescape')).hexdigest()}"


@lru_cache(maxsize=1024)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def sign(key: bytes, sts: str) -> str:
    return hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
