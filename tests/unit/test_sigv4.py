"""SigV4 verification against botocore's signer (the reference client), and aws-chunked decoding."""
import asyncio
import base64
import datetime as dt
import os
import zlib
from urllib.parse import urlsplit, parse_qsl

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest

from epochfs.common import errors
from epochfs.gateway.s3.body import AwsChunkedDecoder, BodyCheck
from epochfs.gateway.s3.errors import S3Error, from_domain
from epochfs.gateway.s3.sigv4 import SigV4Verifier, parse_users

USERS = {u.access_key: u for u in parse_users("AKID:secret1:o1:one,BKID:secret2")}


def signed(method, url, headers=None, secret="secret1", presign=None):
    req = botocore.awsrequest.AWSRequest(method=method, url=url, headers=headers or {})
    creds = botocore.credentials.Credentials("AKID", secret)
    if presign:
        botocore.auth.S3SigV4QueryAuth(creds, "s3", "us-east-1", expires=presign).add_auth(req)
    else:
        req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        botocore.auth.S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    parts = urlsplit(req.url)
    hdrs = {k.lower(): v for k, v in req.headers.items()}
    hdrs.setdefault("host", parts.netloc)
    return parts.path.encode(), parse_qsl(parts.query, keep_blank_values=True), hdrs


def test_header_signature_accepted():
    path, q, h = signed("GET", "http://h:1/bucket/some%20key/%C3%BC?list-type=2&prefix=a%2Fb")
    res = SigV4Verifier(USERS).verify("GET", path, q, h)
    assert res.user.owner_id == "o1"


def test_wrong_secret_rejected():
    path, q, h = signed("GET", "http://h:1/bucket/key", secret="wrong")
    with pytest.raises(S3Error) as e:
        SigV4Verifier(USERS).verify("GET", path, q, h)
    assert e.value.code == "SignatureDoesNotMatch" and e.value.status == 403


def test_tampered_query_rejected():
    path, q, h = signed("GET", "http://h:1/bucket?prefix=a")
    with pytest.raises(S3Error):
        SigV4Verifier(USERS).verify("GET", path, [("prefix", "b")], h)


def test_presigned_url_and_expiry():
    path, q, h = signed("GET", "http://h:1/bucket/key", presign=60)
    v = SigV4Verifier(USERS)
    assert v.verify("GET", path, q, h).user.access_key == "AKID"
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=120)
    with pytest.raises(S3Error) as e:
        v.verify("GET", path, q, h, now=later)
    assert e.value.code == "AccessDenied"


def test_unknown_key_and_anonymous():
    path, q, h = signed("GET", "http://h:1/b/k")
    h["authorization"] = h["authorization"].replace("AKID", "ZZZZ")
    with pytest.raises(S3Error) as e:
        SigV4Verifier(USERS).verify("GET", path, q, h)
    assert e.value.code == "InvalidAccessKeyId"
    assert SigV4Verifier(USERS).verify("GET", b"/b/k", [], {"host": "h"}) is None


async def _pieces(data: bytes, step: int):
    for i in range(0, len(data), step):
        yield data[i:i + step]


def decode(body: bytes, step: int):
    async def go():
        dec = AwsChunkedDecoder(_pieces(body, step), None)
        out = b"".join([p async for p in dec])
        return out, dec.trailers
    return asyncio.run(go())


@pytest.mark.parametrize("step", [1, 7, 1 << 20])
def test_unsigned_chunked_with_trailer(step):
    payload = b"hello world" * 1000
    crc = base64.b64encode(zlib.crc32(payload).to_bytes(4, "big")).decode()
    body = (f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n" +
            f"x-amz-checksum-crc32:{crc}\r\n\r\n".encode())
    out, trailers = decode(body, step)
    assert out == payload and trailers == {"x-amz-checksum-crc32": crc}
    check = BodyCheck({"x-amz-trailer": "x-amz-checksum-crc32"}, None)
    check.update(out)
    check.verify(trailers)
    bad = BodyCheck({"x-amz-trailer": "x-amz-checksum-crc32"}, None)
    bad.update(out + b"!")
    with pytest.raises(errors.ChecksumMismatch) as e:
        bad.verify(trailers)
    assert from_domain(e.value).code == "BadDigest"


@pytest.mark.parametrize("step", [1, 7, 1000, 4096, 1 << 20])
def test_chunked_body_of_many_chunks_comes_out_whole_however_it_is_cut(step):
    """Chunk data is passed on as the pieces came (views, no copy) except after a chunk header in the same piece:
    the pieces' cuts land inside headers, data and CRLFs, and the payload comes out byte for byte."""
    sizes = [1, 4095, 4096, 4097, 10_000, 31_711]
    payload = os.urandom(sum(sizes))
    body, pos = b"", 0
    for n in sizes:
        body += f"{n:x}\r\n".encode() + payload[pos:pos + n] + b"\r\n"
        pos += n
    body += b"0\r\n\r\n"
    out, trailers = decode(body, step)
    assert out == payload and trailers == {}


def test_truncated_chunked_body_is_incomplete():
    with pytest.raises(S3Error) as e:
        decode(b"100\r\nabc", 2)
    assert e.value.code == "IncompleteBody"


def test_bad_content_md5():
    check = BodyCheck({"content-md5": base64.b64encode(b"0" * 16).decode()}, None)
    check.update(b"data")
    with pytest.raises(errors.ChecksumMismatch) as e:
        check.verify()
    assert from_domain(e.value).code == "BadDigest"


def test_sigv2_header_and_presigned():
    v = SigV4Verifier(USERS)
    creds = botocore.credentials.Credentials("AKID", "secret1")
    req = botocore.awsrequest.AWSRequest(method="PUT", url="http://h:1/bucket/k%20ey?acl",
                                         headers={"Content-Type": "text/plain", "x-amz-meta-a": "b"})
    botocore.auth.HmacV1Auth(creds).add_auth(req)
    parts = urlsplit(req.url)
    hdrs = {k.lower(): v for k, v in req.headers.items()}
    assert v.verify("PUT", parts.path.encode(), parse_qsl(parts.query, keep_blank_values=True), hdrs).user.owner_id == "o1"
    req = botocore.awsrequest.AWSRequest(method="GET", url="http://h:1/bucket/key")
    botocore.auth.HmacV1QueryAuth(creds, expires=60).add_auth(req)
    parts = urlsplit(req.url)
    q = parse_qsl(parts.query, keep_blank_values=True)
    assert v.verify("GET", parts.path.encode(), q, {"host": "h:1"}).user.access_key == "AKID"
    with pytest.raises(S3Error) as e:
        v.verify("GET", b"/bucket/other", q, {"host": "h:1"})
    assert e.value.code == "SignatureDoesNotMatch"
