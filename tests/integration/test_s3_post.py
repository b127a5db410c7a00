"""Browser-form POST uploads beyond the moto-compared scenario (test_s3_contract.py post_upload): SigV2 policies,
anonymous uploads into a public-write bucket, redirects, a multi-block file, bad forms, and a cut-off upload that
must leave nothing behind."""
from __future__ import annotations

import hashlib
import os
import socket
import time
from urllib.parse import parse_qs, urlsplit

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from cluster import MAIN

pytestmark = pytest.mark.integration


def _post(cluster, bucket: str, fields: dict, body: bytes, filename: str = "f.bin") -> httpx.Response:
    return httpx.post(f"{cluster.endpoint}/{bucket}", data=fields, files={"file": (filename, body)}, timeout=60)


def test_sigv2_policy_and_redirect(cluster, bucket):
    v2 = boto3.client("s3", endpoint_url=cluster.endpoint, aws_access_key_id=MAIN[0], aws_secret_access_key=MAIN[1],
                      region_name="us-east-1", config=Config(signature_version="s3", s3={"addressing_style": "path"}))
    p = v2.generate_presigned_post(bucket, "v2/${filename}", Fields={"success_action_redirect": "http://app/done"},
                                   Conditions=[{"success_action_redirect": "http://app/done"}])
    assert "AWSAccessKeyId" in p["fields"] and "signature" in p["fields"]
    r = _post(cluster, bucket, p["fields"], b"signed with v2", filename="a b.txt")
    assert r.status_code == 303
    loc = urlsplit(r.headers["location"])
    q = parse_qs(loc.query)
    assert (loc.netloc, q["bucket"], q["key"]) == ("app", [bucket], ["v2/a b.txt"])
    assert q["etag"] == [f'"{hashlib.md5(b"signed with v2").hexdigest()}"']
    assert cluster.s3().get_object(Bucket=bucket, Key="v2/a b.txt")["Body"].read() == b"signed with v2"
    bad = {**p["fields"], "signature": "AAAA" + p["fields"]["signature"][4:]}
    assert _post(cluster, bucket, bad, b"x").status_code == 403


def test_anonymous_upload_needs_a_bucket_that_lets_anyone_write(cluster, s3, bucket):
    assert _post(cluster, bucket, {"key": "anon"}, b"1").status_code == 403
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read-write")
    r = _post(cluster, bucket, {"key": "anon", "Content-Type": "text/csv", "x-amz-meta-from": "form"}, b"a,b\n")
    assert r.status_code == 204
    h = s3.head_object(Bucket=bucket, Key="anon")
    assert (h["ContentType"], h["Metadata"], h["ContentLength"]) == ("text/csv", {"from": "form"}, 4)


def test_multi_block_file_streams_whole(cluster, s3, bucket):
    body = os.urandom(9 << 20)  # more than two 4 MiB blocks
    p = s3.generate_presigned_post(bucket, "big.bin")
    r = _post(cluster, bucket, p["fields"], body)
    assert r.status_code == 204, r.text
    got = s3.get_object(Bucket=bucket, Key="big.bin")
    assert got["ETag"] == f'"{hashlib.md5(body).hexdigest()}"' and got["Body"].read() == body


def test_bad_forms(cluster, bucket):
    r = httpx.post(f"{cluster.endpoint}/{bucket}", content=b"key=x", headers={"content-type": "text/plain"})
    assert r.status_code == 412
    r = httpx.post(f"{cluster.endpoint}/{bucket}", content=b"--zz\r\nnot a part\r\n",
                   headers={"content-type": "multipart/form-data; boundary=zz"})
    assert r.status_code == 400
    r = httpx.post(f"{cluster.endpoint}/{bucket}", data={"key": "k"}, files={"other": ("f", b"1")})
    assert r.status_code == 400  # no part named "file"
    huge = (b"--zz\r\nContent-Disposition: form-data; name=\"key\"; x=\"" + b"a" * (64 << 10)
            + b"\"\r\n\r\nk\r\n--zz--\r\n")
    r = httpx.post(f"{cluster.endpoint}/{bucket}", content=huge,
                   headers={"content-type": "multipart/form-data; boundary=zz"})
    assert r.status_code == 400 and b"MalformedPOSTRequest" in r.content


def test_cut_off_upload_leaves_nothing(cluster, s3, bucket):
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read-write")
    head = (b"--b0\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\ncut\r\n"
            b"--b0\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n")
    host, port = urlsplit(cluster.endpoint).netloc.split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"POST /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Type: multipart/form-data; boundary=b0\r\n"
                     f"Content-Length: {len(head) + (8 << 20)}\r\n\r\n".encode() + head + os.urandom(5 << 20))
        time.sleep(0.5)
    deadline = time.monotonic() + 2  # the gateway notices the cut at once
    while time.monotonic() < deadline:
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket=bucket, Key="cut")
        assert e.value.response["Error"]["Code"] == "404"
        time.sleep(0.5)
