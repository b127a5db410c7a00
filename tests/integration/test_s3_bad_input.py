"""Bad input through the real gateway: each request gets S3's exact error code and status, and leaves nothing behind
(no key in the listing, no pending allocation, no block on any DataNode that no object refers to).

A client that hangs up mid-upload is covered by test_cluster_core.py::test_disconnect_mid_upload_leaves_nothing.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import time
import uuid
import zlib
from contextlib import contextmanager
from urllib.parse import quote

import botocore
import botocore.auth
import botocore.awsrequest
import botocore.credentials
import httpx
import pytest
from botocore.exceptions import ClientError
from cluster import ALT, MAIN

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- helpers
def err(exc_info) -> tuple[int, str]:
    r = exc_info.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def raw_request(cluster, method: str, path: str, *, body: bytes = b"", headers: dict | None = None,
                user=MAIN, signed_body: bytes | None = None) -> tuple[int, str, bytes]:
    """A SigV4-signed request whose path goes on the wire byte for byte (no normalization, no re-encoding); the
    x-amz-content-sha256 header is the hash of `signed_body` if given (default: of `body`).
    Returns (status, S3 error code or "", body)."""
    url = f"{cluster.endpoint}{path}"
    req = botocore.awsrequest.AWSRequest(method=method, url=url, data=body if signed_body is None else signed_body,
                                         headers=headers or {})
    botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(user[0], user[1]), "s3", "us-east-1").add_auth(req)
    conn = http.client.HTTPConnection("127.0.0.1", cluster.ports["gw"], timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in req.headers.items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    code = ""
    if b"<Code>" in data:
        code = data.split(b"<Code>", 1)[1].split(b"</Code>", 1)[0].decode()
    return resp.status, code, data


def all_keys(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


@contextmanager
def nothing_stored(cluster, bucket: str):
    """The block must leave the bucket's keys and the DataNodes' live blocks unchanged: after GC every stored block
    belongs to an object, and no allocation still pending (a gateway's unused lease) holds data."""
    s3 = cluster.s3()
    keys = all_keys(s3, bucket)
    blocks = cluster.datanode_blocks()
    yield
    assert all_keys(s3, bucket) == keys, "a rejected request changed the bucket"
    cluster.collect_garbage()
    referenced = set(cluster.nn.referenced())
    pending = set(cluster.nn.pending())
    for dn, now in cluster.datanode_blocks().items():
        assert now - blocks[dn] <= referenced, f"{dn} kept blocks of a rejected upload"
        # (copies stored meanwhile: other tests of the session may leave pending allocations to the expiry)
        assert not (now - blocks[dn]) & pending, f"{dn} holds data of a rejected upload's allocation"


# ---------------------------------------------------------------- bucket names
@pytest.mark.parametrize("name", ["ab", "a" * 64, "-abc", "abc-", "ABCD", "a_bcd", "a..b", "a.-b", "a-.b",
                                  "192.168.5.4", "xn--abcd", "abc-s3alias"])
def test_invalid_bucket_name(cluster, s3, name):
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=name)
    assert err(e) == (400, "InvalidBucketName")
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


@pytest.mark.parametrize("name", ["a%21bc", "a%20bc", "a%C3%A9bc"])
def test_invalid_bucket_name_characters(cluster, s3, name):
    """Characters botocore refuses to send at all: a raw request gets the same answer."""
    status, code, _ = raw_request(cluster, "PUT", f"/{name}")
    assert (status, code) == (400, "InvalidBucketName")
    assert all(b["Name"] not in ("a!bc", "a bc", "aébc") for b in s3.list_buckets()["Buckets"])


# ---------------------------------------------------------------- keys
def test_key_too_long(cluster, s3, bucket):
    with nothing_stored(cluster, bucket):
        for key in ("k" * 1025, "é" * 513):  # 1,025 and 1,026 bytes of UTF-8
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket=bucket, Key=key, Body=b"data")
            assert err(e) == (400, "KeyTooLongError")
    s3.put_object(Bucket=bucket, Key="k" * 1024, Body=b"data")  # the limit itself is fine
    assert all_keys(s3, bucket) == ["k" * 1024]


@pytest.mark.parametrize("raw_key", ["bad%FFkey", "bad%C3%28", "%ED%A0%80surrogate", "dir/%C0%AFslash"])
def test_key_not_utf8(cluster, s3, bucket, raw_key):
    with nothing_stored(cluster, bucket):
        status, code, _ = raw_request(cluster, "PUT", f"/{bucket}/{raw_key}", body=b"data")
        assert (status, code) == (400, "InvalidURI")
    assert all_keys(s3, bucket) == []


@pytest.mark.parametrize("key", ["a/../b", "../escape", "a/..", "./a", "a/./b", "a/.", "a//b", "/lead", "..", "."])
def test_key_with_dot_or_empty_segments(cluster, s3, bucket, key):
    """Keys name exactly one place in the POSIX tree, so '.', '..' and empty segments are refused."""
    with nothing_stored(cluster, bucket):
        status, code, _ = raw_request(cluster, "PUT", f"/{bucket}/{quote(key, safe='/.')}", body=b"data")
        assert (status, code) == (400, "InvalidArgument")
    assert all_keys(s3, bucket) == []


# ---------------------------------------------------------------- authentication
def test_wrong_secret_key(cluster, s3, bucket):
    bad = cluster.s3((MAIN[0], "not-the-secret-" + MAIN[1][15:]))
    with nothing_stored(cluster, bucket):
        with pytest.raises(ClientError) as e:
            bad.put_object(Bucket=bucket, Key="k", Body=b"data")
        assert err(e) == (403, "SignatureDoesNotMatch")
        with pytest.raises(ClientError) as e:
            bad.list_objects_v2(Bucket=bucket)
        assert err(e) == (403, "SignatureDoesNotMatch")


def test_unknown_access_key(cluster, s3, bucket):
    bad = cluster.s3(("AKIAUNKNOWNKEY000000", MAIN[1]))
    with nothing_stored(cluster, bucket):
        with pytest.raises(ClientError) as e:
            bad.put_object(Bucket=bucket, Key="k", Body=b"data")
        assert err(e) == (403, "InvalidAccessKeyId")
        with pytest.raises(ClientError) as e:
            bad.get_object(Bucket=bucket, Key="k")
        assert err(e) == (403, "InvalidAccessKeyId")


def test_expired_presigned_url(cluster, bucket):
    s3v4 = cluster.s3(signature_version="s3v4")
    s3v4.put_object(Bucket=bucket, Key="exists", Body=b"old")
    get = s3v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "exists"}, ExpiresIn=1)
    put = s3v4.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "new"}, ExpiresIn=1)
    time.sleep(2.1)
    with nothing_stored(cluster, bucket):
        for r in (httpx.get(get), httpx.put(put, content=b"data")):
            assert r.status_code == 403
            assert b"<Code>AccessDenied</Code>" in r.content
    assert s3v4.get_object(Bucket=bucket, Key="exists")["Body"].read() == b"old"


def test_anonymous_requests_denied(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="private", Body=b"secret")
    anon = cluster.s3(signature_version=botocore.UNSIGNED)
    with nothing_stored(cluster, bucket):
        for call in (lambda: anon.get_object(Bucket=bucket, Key="private"),
                     lambda: anon.list_objects_v2(Bucket=bucket),
                     lambda: anon.put_object(Bucket=bucket, Key="anon", Body=b"data"),
                     lambda: anon.delete_object(Bucket=bucket, Key="private")):
            with pytest.raises(ClientError) as e:
                call()
            assert err(e) == (403, "AccessDenied")
        assert anon.list_buckets()["Buckets"] == []  # as S3: an anonymous caller owns no bucket
        r = httpx.get(f"{cluster.endpoint}/{bucket}/private")
        assert r.status_code == 403 and b"<Code>AccessDenied</Code>" in r.content
    with pytest.raises(ClientError) as e:
        anon.create_bucket(Bucket=f"anon-{uuid.uuid4().hex[:8]}")
    assert err(e) == (403, "AccessDenied")


def test_alt_user_cannot_touch_main_users_bucket(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="mine", Body=b"main's data")
    alt = cluster.s3(ALT)
    with nothing_stored(cluster, bucket):
        for call in (lambda: alt.get_object(Bucket=bucket, Key="mine"),
                     lambda: alt.list_objects_v2(Bucket=bucket),
                     lambda: alt.list_objects(Bucket=bucket),
                     lambda: alt.put_object(Bucket=bucket, Key="alt", Body=b"data"),
                     lambda: alt.delete_object(Bucket=bucket, Key="mine"),
                     lambda: alt.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "mine"}),
                     lambda: alt.delete_bucket(Bucket=bucket)):
            with pytest.raises(ClientError) as e:
                call()
            assert err(e) == (403, "AccessDenied")
        with pytest.raises(ClientError) as e:
            alt.head_object(Bucket=bucket, Key="mine")
        assert err(e)[0] == 403
    assert bucket not in [b["Name"] for b in alt.list_buckets()["Buckets"]]
    assert s3.get_object(Bucket=bucket, Key="mine")["Body"].read() == b"main's data"


def test_alt_user_cannot_copy_out_of_main_users_bucket(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="mine", Body=b"main's data")
    alt = cluster.s3(ALT)
    alt_bucket = f"alt-{uuid.uuid4().hex[:12]}"
    alt.create_bucket(Bucket=alt_bucket)
    with nothing_stored(cluster, alt_bucket):
        with pytest.raises(ClientError) as e:
            alt.copy_object(Bucket=alt_bucket, Key="stolen", CopySource={"Bucket": bucket, "Key": "mine"})
        assert err(e) == (403, "AccessDenied")


# ---------------------------------------------------------------- digests and checksums
def test_bad_content_md5_new_key(cluster, s3, bucket):
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with nothing_stored(cluster, bucket):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 100_000, ContentMD5=wrong)
        assert err(e) == (400, "BadDigest")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k")
    assert err(e)[0] == 404


def test_bad_content_md5_keeps_existing_object(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"original")
    etag = s3.head_object(Bucket=bucket, Key="k")["ETag"]
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with nothing_stored(cluster, bucket):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="k", Body=b"replacement" * 1000, ContentMD5=wrong)
        assert err(e) == (400, "BadDigest")
    r = s3.get_object(Bucket=bucket, Key="k")
    assert (r["Body"].read(), r["ETag"]) == (b"original", etag)


def test_malformed_content_md5(cluster, s3, bucket):
    with nothing_stored(cluster, bucket):
        for bad in ("not base64!", base64.b64encode(b"short").decode()):
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket=bucket, Key="k", Body=b"data", ContentMD5=bad)
            assert err(e) == (400, "InvalidDigest")


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


@pytest.mark.parametrize("alg,wrong", [
    ("CRC32", _b64(zlib.crc32(b"other").to_bytes(4, "big"))),
    ("CRC32C", _b64(b"\x01\x02\x03\x04")),
    ("SHA1", _b64(hashlib.sha1(b"other").digest())),
    ("SHA256", _b64(hashlib.sha256(b"other").digest())),
])
def test_wrong_checksum(cluster, s3, bucket, alg, wrong):
    """S3 answers a checksum that doesn't match the body with BadDigest, and stores nothing."""
    s3.put_object(Bucket=bucket, Key="existing", Body=b"original")
    with nothing_stored(cluster, bucket):
        for key in ("k", "existing"):
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket=bucket, Key=key, Body=b"d" * 70_000, **{f"Checksum{alg}": wrong})
            assert err(e) == (400, "BadDigest")
    assert s3.get_object(Bucket=bucket, Key="existing")["Body"].read() == b"original"


@pytest.mark.parametrize("alg,bad", [("crc32", "not-base64!"), ("crc32", _b64(b"\x00" * 8)),
                                     ("crc32c", _b64(b"\x00" * 3)), ("sha256", _b64(b"\x00" * 20))])
def test_malformed_checksum(cluster, s3, bucket, alg, bad):
    """A checksum value that can't be one (bad base64, wrong length) is InvalidRequest, not BadDigest."""
    with nothing_stored(cluster, bucket):
        status, code, body = raw_request(cluster, "PUT", f"/{bucket}/k", body=b"data",
                                         headers={f"x-amz-checksum-{alg}": bad})
        assert (status, code) == (400, "InvalidRequest"), body


def test_wrong_payload_sha256(cluster, s3, bucket):
    with nothing_stored(cluster, bucket):
        status, code, _ = raw_request(cluster, "PUT", f"/{bucket}/k", body=b"data", signed_body=b"othr")
        assert (status, code) == (400, "XAmzContentSHA256Mismatch")


# ---------------------------------------------------------------- reads and deletes
def test_range_outside_object(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="r", Body=b"0123456789")
    for spec in ("bytes=10-", "bytes=10-20", "bytes=100-200"):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key="r", Range=spec)
        assert err(e) == (416, "InvalidRange")
        assert e.value.response["ResponseMetadata"]["HTTPHeaders"].get("content-range") == "bytes */10"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range="bytes=-0")
    assert err(e) == (416, "InvalidRange")


def test_delete_non_empty_bucket(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="deep/down/k", Body=b"data")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert err(e) == (409, "BucketNotEmpty")
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.get_object(Bucket=bucket, Key="deep/down/k")["Body"].read() == b"data"
    s3.delete_object(Bucket=bucket, Key="deep/down/k")
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket=bucket)
    assert err(e)[0] == 404


def test_delete_bucket_with_only_an_upload_in_progress(cluster, s3, bucket):
    """An unfinished multipart upload doesn't keep a bucket from being deleted (S3 drops the upload), and its
    parts' blocks are collected."""
    before = cluster.datanode_blocks()
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mpu")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="mpu", UploadId=uid, PartNumber=1, Body=b"p" * 100_000)
    s3.delete_bucket(Bucket=bucket)
    cluster.collect_garbage()
    referenced = set(cluster.nn.referenced())
    for dn, now in cluster.datanode_blocks().items():
        assert now - before[dn] <= referenced, f"{dn} kept the parts of a dropped upload"


def test_error_before_body_does_not_poison_the_connection(cluster, s3, bucket):
    """botocore sends PUT bodies after `Expect: 100-continue`; when the answer is an error instead, it never sends the
    body and reuses the connection, so the gateway must close it rather than read the next request as that body."""
    for _ in range(3):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket + "-missing", Key="k", Body=b"x" * 5000)
        assert err(e) == (404, "NoSuchBucket")
        s3.put_object(Bucket=bucket, Key="k", Body=b"y" * 5000)
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"y" * 5000


def test_canned_acls_grant_anonymous_access(cluster, s3):
    anon = cluster.s3(signature_version=botocore.UNSIGNED)
    name = f"pub-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name, ACL="public-read")
    s3.put_object(Bucket=name, Key="open", Body=b"for all", ACL="public-read")
    s3.put_object(Bucket=name, Key="closed", Body=b"owner only")
    assert anon.get_object(Bucket=name, Key="open")["Body"].read() == b"for all"
    assert [o["Key"] for o in anon.list_objects_v2(Bucket=name)["Contents"]] == ["closed", "open"]
    with pytest.raises(ClientError) as e:
        anon.get_object(Bucket=name, Key="closed")
    assert err(e) == (403, "AccessDenied")
    with pytest.raises(ClientError) as e:
        anon.put_object(Bucket=name, Key="anon", Body=b"x")
    assert err(e) == (403, "AccessDenied")
    s3.put_bucket_acl(Bucket=name, ACL="public-read-write")
    anon.put_object(Bucket=name, Key="anon", Body=b"x")
    grants = s3.get_bucket_acl(Bucket=name)["Grants"]
    assert {g["Permission"] for g in grants} == {"FULL_CONTROL", "READ", "WRITE"}
    s3.put_object_acl(Bucket=name, Key="open", ACL="private")
    with pytest.raises(ClientError) as e:
        anon.get_object(Bucket=name, Key="open")
    assert err(e) == (403, "AccessDenied")


def test_cors_configuration_and_preflight(cluster, s3, bucket):
    url = f"{cluster.endpoint}/{bucket}/obj"
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert err(e) == (404, "NoSuchCORSConfiguration")
    assert httpx.options(url).status_code == 400  # no Origin
    pre = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "GET"}
    assert httpx.options(url, headers=pre).status_code == 403  # no rule yet
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["https://*.example.com"], "AllowedMethods": ["GET", "HEAD"], "AllowedHeaders": ["x-amz-*"],
         "MaxAgeSeconds": 60}]})
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"][0]["AllowedMethods"] == ["GET", "HEAD"]
    r = httpx.options(url, headers={**pre, "Access-Control-Request-Headers": "x-amz-date"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://app.example.com"
    assert r.headers["access-control-max-age"] == "60"
    assert httpx.options(url, headers={**pre, "Access-Control-Request-Method": "PUT"}).status_code == 403
    assert httpx.options(url, headers={**pre, "Origin": "https://evil.test"}).status_code == 403
    s3.put_object(Bucket=bucket, Key="obj", Body=b"x")
    signed = cluster.s3(signature_version="s3v4").generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "obj"})
    r = httpx.get(signed, headers={"Origin": "https://app.example.com"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example.com"
    s3.delete_bucket_cors(Bucket=bucket)
    assert httpx.options(url, headers=pre).status_code == 403


def test_presigned_urls_with_default_boto3_config(cluster, s3, bucket):
    """boto3 signs presigned URLs with SigV2 unless told otherwise; both versions must work."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"payload")
    for client in (cluster.s3(), cluster.s3(signature_version="s3v4")):
        url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60)
        r = httpx.get(url)
        assert r.status_code == 200 and r.content == b"payload"
        bad = url.replace("Signature=", "Signature=A").replace("X-Amz-Signature=", "X-Amz-Signature=0")
        assert httpx.get(bad).status_code == 403
    put = cluster.s3().generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=60)
    assert httpx.put(put, content=b"up").status_code == 200
    assert s3.get_object(Bucket=bucket, Key="p")["Body"].read() == b"up"
