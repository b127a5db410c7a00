"""Batch ingest of small objects (POST /_epochfs/put, gateway/s3/ingest.py) on a live cluster, and its users:
`epochfs cp`/`sync` of a folder, fsspec put and pipe of many files."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import uuid

import fsspec
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from cluster import ALT, MAIN, wait_until
from epochfs.common import errors
from epochfs.common.blocks import crc32c
from epochfs.common.client import S3Client

pytestmark = pytest.mark.integration


def body_of(items: list[dict], datas: list[bytes]) -> bytes:
    head = json.dumps({"items": items}).encode()
    return len(head).to_bytes(4, "big") + head + b"".join(datas)


def post(cluster, bucket: str, body: bytes, *, user=MAIN, payload_hash: str = "UNSIGNED-PAYLOAD",
         sign: bool = True, headers: dict | None = None) -> httpx.Response:
    """A raw POST /_epochfs/put/<bucket>, SigV4-signed by botocore as any S3 request."""
    url = f"{cluster.endpoint}/_epochfs/put/{bucket}"
    h = {"x-amz-content-sha256": payload_hash, **(headers or {})}
    if sign:
        req = AWSRequest("POST", url, data=body, headers=h)
        SigV4Auth(Credentials(user[0], user[1]), "s3", "us-east-1").add_auth(req)
        h = dict(req.headers.items())
    return httpx.post(url, content=body, headers=h, timeout=60)


def put_many(cluster, bucket, items, user=MAIN):
    """The gateway's batch PUT (direct writes off: test_direct_writes.py covers those)."""
    async def go():
        async with S3Client(cluster.endpoint, user[0], user[1], direct_writes=False) as c:
            return await c.put_many(bucket, items)
    return asyncio.run(go())


def listed(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def sample(i: int, size: int) -> bytes:
    head = f"{i}:".encode()
    return (head + hashlib.shake_128(head).digest(size))[:size]


def test_a_batch_lands_whole_with_its_etags_and_replicas(cluster, bucket, s3):
    sizes = [0, 1, 1000, 110 << 10, (4 << 20) + 5, 300 << 10] + [2048] * 60  # one item of two blocks
    items = [(f"shard{i % 3}/d{i % 5}/s{i:03d}.bin", sample(i, n)) for i, n in enumerate(sizes)]
    etags = put_many(cluster, bucket, items)
    assert etags == [hashlib.md5(d).hexdigest() for _, d in items]
    for (key, data), etag in zip(items, etags):
        got = s3.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == data and got["ETag"] == f'"{etag}"'
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert head["ContentLength"] == len(data) and head["ETag"] == f'"{etag}"'
        assert head["ChecksumCRC32C"] == base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()
    assert sorted(listed(s3, bucket)) == sorted(k for k, _ in items)
    # each block on its three nodes once replication has run
    blocks = {b.id for k, _ in items for b in cluster.nn.stat(bucket, k).obj.blocks}
    assert len(blocks) == len(items)  # the empty one has none, the 4 MiB + 5 one two

    def replicated():
        cluster.replicate_once()
        held = cluster.datanode_blocks()
        return all(sum(b in h for h in held.values()) == 3 for b in blocks)
    wait_until(replicated, 30, "three replicas of every block")
    # the same through a second batch: overwrites replace, the usage counts each key once
    again = put_many(cluster, bucket, [(k, d[::-1]) for k, d in items[:5]])
    assert again == [hashlib.md5(d[::-1]).hexdigest() for _, d in items[:5]]
    assert s3.get_object(Bucket=bucket, Key=items[3][0])["Body"].read() == items[3][1][::-1]
    assert (lambda u: (u.bytes, u.objects))(cluster.nn.bucket_usage(bucket)[bucket]) == (sum(sizes), len(items))


def test_one_bad_item_is_its_own_error(cluster, bucket, s3):
    datas = [b"good one", b"bad checksum", b"bad md5", b"x", b"meta"]
    items = [{"key": "a", "size": 8, "ctype": "text/plain", "checksum": {"crc32c": base64.b64encode(
                crc32c(datas[0]).to_bytes(4, "big")).decode()}},
             {"key": "b", "size": 12, "checksum": {"crc32c": base64.b64encode(b"\0\0\0\0").decode()}},
             {"key": "c", "size": 7, "md5": base64.b64encode(hashlib.md5(b"other").digest()).decode()},
             {"key": "x" * 1100, "size": 1},
             {"key": "m", "size": 4, "meta": {"color": "blue"}}]
    r = post(cluster, bucket, body_of(items, datas))
    assert r.status_code == 200, r.text
    res = r.json()["items"]
    assert res[0]["etag"] == f'"{hashlib.md5(datas[0]).hexdigest()}"' and "crc32c" in res[0]["cs"]
    assert res[1]["err"] == "BadDigest" and res[2]["err"] == "BadDigest" and res[3]["err"] == "KeyTooLongError"
    assert sorted(listed(s3, bucket)) == ["a", "m"]
    assert s3.head_object(Bucket=bucket, Key="a")["ContentType"] == "text/plain"
    assert s3.head_object(Bucket=bucket, Key="m")["Metadata"] == {"color": "blue"}
    cluster.collect_garbage()  # the refused items' blocks, if any were stored, are collected


@pytest.mark.parametrize("case", ["unsigned", "bad-signature", "other-user", "too-many", "oversized", "sizes",
                                  "duplicate", "sha256", "not-json", "no-bucket"])
def test_bad_requests_answer_an_s3_error_and_write_nothing(cluster, bucket, s3, case):
    items, datas = [{"key": "k1", "size": 3}, {"key": "k2", "size": 3}], [b"abc", b"def"]
    body = body_of(items, datas)
    want = {"unsigned": (403, "AccessDenied"), "bad-signature": (403, "SignatureDoesNotMatch"),
            "other-user": (403, "AccessDenied"), "too-many": (400, "InvalidRequest"),
            "oversized": (400, "EntityTooLarge"), "sizes": (400, "MalformedBatch"),
            "duplicate": (400, "MalformedBatch"), "sha256": (400, "XAmzContentSHA256Mismatch"),
            "not-json": (400, "MalformedBatch"), "no-bucket": (404, "NoSuchBucket")}[case]
    target = bucket
    if case == "unsigned":
        r = post(cluster, bucket, body, sign=False)
    elif case == "bad-signature":
        r = post(cluster, bucket, body, user=(MAIN[0], "wrong" * 8))
    elif case == "other-user":
        r = post(cluster, bucket, body, user=ALT)
    elif case == "too-many":
        r = post(cluster, bucket, body_of([{"key": f"k{i}", "size": 0} for i in range(1001)], []))
    elif case == "oversized":
        r = post(cluster, bucket, body_of([{"key": "big", "size": 33 << 20}], [bytes(33 << 20)]))
    elif case == "sizes":
        r = post(cluster, bucket, body + b"extra")
    elif case == "duplicate":
        r = post(cluster, bucket, body_of([{"key": "k1", "size": 3}, {"key": "k1", "size": 3}], datas))
    elif case == "sha256":
        r = post(cluster, bucket, body, payload_hash=hashlib.sha256(b"something else").hexdigest())
    elif case == "not-json":
        r = post(cluster, bucket, (5).to_bytes(4, "big") + b"{oops" + b"abc")
    else:
        target = f"no-such-{uuid.uuid4().hex[:8]}"
        r = post(cluster, target, body)
    assert (r.status_code, r.text.split("<Code>")[1].split("</Code>")[0]) == want, r.text
    assert listed(s3, bucket) == []
    # the same body, signed right with its SHA-256 checked, goes in
    if case == "sha256":
        r = post(cluster, bucket, body, payload_hash=hashlib.sha256(body).hexdigest())
        assert r.status_code == 200 and sorted(listed(s3, bucket)) == ["k1", "k2"]


def test_quota_exceeded_mid_batch_commits_what_fits(cluster, bucket, s3):
    cluster.nn.bucket_settings(bucket, quota_objects=5)
    s3.put_object(Bucket=bucket, Key="first", Body=b"1")
    res = put_many(cluster, bucket, [(f"k{i}", sample(i, 1000)) for i in range(8)])
    assert [isinstance(r, str) for r in res] == [True] * 4 + [False] * 4
    assert all(isinstance(r, errors.QuotaExceeded) for r in res[4:])
    assert sorted(listed(s3, bucket)) == ["first", "k0", "k1", "k2", "k3"]
    assert (lambda u: (u.bytes, u.objects))(cluster.nn.bucket_usage(bucket)[bucket]) == (1 + 4000, 5)
    cluster.collect_garbage()  # the refused items' blocks go
    for i in range(4):
        assert s3.get_object(Bucket=bucket, Key=f"k{i}")["Body"].read() == sample(i, 1000)


def test_versioned_bucket_and_conditions(cluster, bucket, s3):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bucket, Key="a", Body=b"one")["VersionId"]
    r = post(cluster, bucket, body_of([{"key": "a", "size": 3}, {"key": "b", "size": 5},
                                       {"key": "a2", "size": 1, "if_none_match": "*"}], [b"two", b"three", b"z"]))
    res = r.json()["items"]
    assert res[0]["vid"] and res[0]["vid"] != v1 and res[1]["vid"] and res[2]["vid"]
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"two"
    assert s3.get_object(Bucket=bucket, Key="a", VersionId=v1)["Body"].read() == b"one"
    assert s3.get_object(Bucket=bucket, Key="a")["VersionId"] == res[0]["vid"]
    versions = s3.list_object_versions(Bucket=bucket, Prefix="a")["Versions"]
    assert sorted(v["VersionId"] for v in versions if v["Key"] == "a") == sorted([v1, res[0]["vid"]])
    r = post(cluster, bucket, body_of([{"key": "a2", "size": 1, "if_none_match": "*"}], [b"y"]))
    assert r.json()["items"][0]["err"] == "PreconditionFailed"
    assert s3.get_object(Bucket=bucket, Key="a2")["Body"].read() == b"z"


def test_sync_write_policy_waits_for_the_replicas(cluster, bucket, s3):
    cluster.nn.bucket_settings(bucket, write_policy="sync:3")
    items = [(f"s{i}", sample(i, 5000)) for i in range(20)]
    assert put_many(cluster, bucket, items) == [hashlib.md5(d).hexdigest() for _, d in items]
    held = cluster.datanode_blocks()  # no replication pass: the acknowledgement waited for all three
    for k, _ in items:
        for b in cluster.nn.stat(bucket, k).obj.blocks:
            assert sum(b.id in h for h in held.values()) == 3


def test_fsspec_put_and_pipe_of_many_files_go_in_batches(cluster, bucket, s3, tmp_path, monkeypatch):
    fs = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                           skip_instance_cache=True)
    calls = {"many": 0, "one": 0}
    orig_many, orig_put = S3Client.put_many, S3Client.put

    async def counted_many(self, *a, **kw):
        calls["many"] += 1
        return await orig_many(self, *a, **kw)

    async def counted_put(self, *a, **kw):
        calls["one"] += 1
        return await orig_put(self, *a, **kw)
    monkeypatch.setattr(S3Client, "put_many", counted_many)
    monkeypatch.setattr(S3Client, "put", counted_put)
    data = {f"{bucket}/piped/{i:03d}.bin": sample(i, 700 + i) for i in range(200)}
    fs.pipe(data)
    assert calls["one"] == 0 and 1 <= calls["many"] <= 4
    src = tmp_path / "src"
    for i in range(150):
        (src / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 4}" / f"f{i}.txt").write_bytes(sample(i, 3000))
    (src / "big.bin").write_bytes(os.urandom(3 << 20))  # above SMALL_PUT: a PUT of its own
    fs.put(str(src), f"{bucket}/put", recursive=True)
    assert calls["one"] == 1
    for name, want in data.items():
        assert s3.get_object(Bucket=bucket, Key=name.split("/", 1)[1])["Body"].read() == want
    for i in range(150):
        assert fs.cat(f"{bucket}/put/d{i % 4}/f{i}.txt") == sample(i, 3000)
    assert fs.cat(f"{bucket}/put/big.bin") == (src / "big.bin").read_bytes()
    with pytest.raises(FileExistsError):
        fs.pipe_file(f"{bucket}/piped/000.bin", b"again", mode="create")
    assert fs.cat(f"{bucket}/piped/000.bin") == data[f"{bucket}/piped/000.bin"]


def epochfs(cluster, *args, ok=True):
    env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1]}
    p = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", *args], env=env, capture_output=True,
                       text=True, timeout=300)
    assert (p.returncode == 0) == ok, p.stderr
    return p


def test_epochfs_cp_and_sync_of_a_folder(cluster, bucket, s3, tmp_path):
    src = tmp_path / "src"
    files = {}
    for i in range(1200):  # more than one batch by count (1,000) and by bytes
        rel = f"part{i % 7}/sample{i:05d}.bin"
        files[rel] = sample(i, [10, 5000, 20000][i % 3])
    files["large.bin"] = os.urandom((1 << 20) + 1)  # above SMALL_FILE: its own PUT
    files["empty"] = b""
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    p = epochfs(cluster, "cp", str(src), f"epochfs://{bucket}/data")
    assert f"{len(files)} copied" in p.stderr
    got = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="data/"):
        got.update({o["Key"][5:]: o["ETag"].strip('"') for o in page.get("Contents", [])})
    assert got == {rel: hashlib.md5(d).hexdigest() for rel, d in files.items()}
    for rel in ("part3/sample00010.bin", "large.bin", "empty"):
        assert s3.get_object(Bucket=bucket, Key=f"data/{rel}")["Body"].read() == files[rel]
    (src / "part0" / "new.bin").write_bytes(b"new")
    p = epochfs(cluster, "sync", str(src), f"epochfs://{bucket}/data")
    assert f"1 copied, {len(files)} unchanged" in p.stderr
    # a file that fails alone: the others still go, the command says which
    cluster.nn.bucket_settings(bucket, quota_objects=len(files) + 3)
    for i in range(5):
        (src / "more" / f"m{i}").parent.mkdir(exist_ok=True)
        (src / "more" / f"m{i}").write_bytes(b"m")
    p = epochfs(cluster, "sync", str(src), f"epochfs://{bucket}/data", ok=False)
    assert "3 of 5 files failed" in p.stderr and "QuotaExceeded" not in p.stderr or "quota" in p.stderr
    assert len([k for k in listed(s3, bucket) if k.startswith("data/more/")]) == 2
