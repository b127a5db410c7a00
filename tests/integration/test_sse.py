"""Server-side encryption against a live cluster: SSE-S3, SSE-KMS, SSE-C and bucket default encryption through boto3
and the aws CLI; the blocks on the DataNodes hold ciphertext; moto as an oracle where it implements the feature."""
from __future__ import annotations

import base64
import hashlib
import os
import subprocess

import pytest
from botocore.exceptions import ClientError
from cluster import MAIN
from test_s3_contract import moto_endpoint  # noqa: F401 (fixture: moto's server as an oracle)
from mounting import Mount, needs_fuse

pytestmark = pytest.mark.integration

KEY_A = os.urandom(32)
KEY_B = os.urandom(32)


def ssec(key: bytes) -> dict:
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": base64.b64encode(key).decode(),
            "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(key).digest()).decode()}


def copy_ssec(key: bytes) -> dict:
    return {"CopySource" + k: v for k, v in ssec(key).items()}


def code(e: pytest.ExceptionInfo) -> tuple[int, str]:
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def stored_bytes(cluster, bucket: str, key: str) -> bytes:
    """The object's bytes as its DataNodes hold them (no decryption); each replica passes its CRC check."""
    res = cluster.nn.stat(bucket, key)
    names = {v: k for k, v in cluster.node_ids().items()}
    return b"".join(cluster.read_replica(names[blk.nodes[0]], blk.id) for blk in res.obj.blocks)


def test_sse_s3_round_trip_and_ciphertext_at_rest(cluster, s3, bucket):
    data = os.urandom(300_000)
    put = s3.put_object(Bucket=bucket, Key="k", Body=data, ServerSideEncryption="AES256")
    assert put["ServerSideEncryption"] == "AES256"
    assert put["ETag"].strip('"') == hashlib.md5(data).hexdigest()  # SSE-S3 keeps the MD5 ETag, as S3
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["ServerSideEncryption"] == "AES256" and got["Body"].read() == data
    assert s3.head_object(Bucket=bucket, Key="k")["ServerSideEncryption"] == "AES256"
    r = s3.get_object(Bucket=bucket, Key="k", Range="bytes=100001-200000")
    assert r["Body"].read() == data[100001:200001]
    at_rest = stored_bytes(cluster, bucket, "k")
    assert len(at_rest) == len(data) and at_rest != data and data[:64] not in at_rest
    # GET may not carry x-amz-server-side-encryption
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", SSECustomerAlgorithm="AES256",
                      SSECustomerKey=base64.b64encode(KEY_A).decode())
    assert code(e)[0] == 400


def test_ranged_reads_across_blocks(cluster, s3, bucket):
    """The test cluster cuts objects into small blocks: ranges start and end inside blocks and span several."""
    data = os.urandom(3 * cluster.block_size + 12345)
    s3.put_object(Bucket=bucket, Key="big", Body=data, ServerSideEncryption="AES256")
    for a, b in ((0, 0), (1, 17), (15, 16), (cluster.block_size - 3, cluster.block_size + 40),
                 (5, 2 * cluster.block_size + 7), (len(data) - 100, len(data) - 1)):
        assert s3.get_object(Bucket=bucket, Key="big", Range=f"bytes={a}-{b}")["Body"].read() == data[a:b + 1]
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == data


def test_sse_kms(s3, bucket):
    data = b"kms" * 1000
    put = s3.put_object(Bucket=bucket, Key="k", Body=data, ServerSideEncryption="aws:kms", SSEKMSKeyId="testkey-1")
    assert put["ServerSideEncryption"] == "aws:kms" and put["SSEKMSKeyId"] == "testkey-1"
    assert put["ETag"].strip('"') != hashlib.md5(data).hexdigest()  # not the MD5, as S3
    h = s3.head_object(Bucket=bucket, Key="k")
    assert (h["ServerSideEncryption"], h["SSEKMSKeyId"]) == ("aws:kms", "testkey-1")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == data
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k2", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId="nope")
    assert code(e) == (400, "KMS.NotFoundException")
    with pytest.raises(ClientError) as e:  # a key id without aws:kms
        s3.put_object(Bucket=bucket, Key="k2", Body=b"x", SSEKMSKeyId="testkey-1")
    assert code(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="k2")  # nothing was written


def test_sse_c_checks_the_key_on_every_read(s3, bucket):
    data = os.urandom(5000)
    put = s3.put_object(Bucket=bucket, Key="c", Body=data, **ssec(KEY_A))
    assert put["SSECustomerAlgorithm"] == "AES256"
    assert put["SSECustomerKeyMD5"] == ssec(KEY_A)["SSECustomerKeyMD5"]
    assert put["ETag"].strip('"') != hashlib.md5(data).hexdigest()
    assert s3.get_object(Bucket=bucket, Key="c", **ssec(KEY_A))["Body"].read() == data
    assert s3.get_object(Bucket=bucket, Key="c", Range="bytes=10-20", **ssec(KEY_A))["Body"].read() == data[10:21]
    assert s3.head_object(Bucket=bucket, Key="c", **ssec(KEY_A))["SSECustomerAlgorithm"] == "AES256"
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c")
        assert code(e)[0] == 400  # no key: InvalidRequest (HEAD has no body to carry the code)
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c", **ssec(KEY_B))
        assert code(e)[0] == 403  # another key: AccessDenied
    # copy: the source needs its key in the copy-source headers; the copy gets its own encryption
    s3.copy_object(Bucket=bucket, Key="c2", CopySource={"Bucket": bucket, "Key": "c"}, **copy_ssec(KEY_A),
                   **ssec(KEY_B))
    assert s3.get_object(Bucket=bucket, Key="c2", **ssec(KEY_B))["Body"].read() == data
    s3.copy_object(Bucket=bucket, Key="plain", CopySource={"Bucket": bucket, "Key": "c"}, **copy_ssec(KEY_A))
    assert s3.get_object(Bucket=bucket, Key="plain")["Body"].read() == data
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="c3", CopySource={"Bucket": bucket, "Key": "c"})
    assert code(e)[0] == 400
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="c3", CopySource={"Bucket": bucket, "Key": "c"}, **copy_ssec(KEY_B))
    assert code(e)[0] == 403


@pytest.mark.parametrize("headers, status, err", [
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256"}, 400, "InvalidArgument"),  # no key
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(b"short").decode(),
      "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(hashlib.md5(b"short").digest()).decode()},
     400, "InvalidArgument"),  # wrong length
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(KEY_A).decode()}, 400, "InvalidArgument"),
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(KEY_A).decode(),
      "x-amz-server-side-encryption-customer-key-MD5": "AAAAAAAAAAAAAAAAAAAAAA=="}, 400, "InvalidArgument"),
    ({"x-amz-server-side-encryption-customer-key": base64.b64encode(KEY_A).decode(),
      "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(hashlib.md5(KEY_A).digest()).decode()},
     400, "InvalidArgument"),  # no algorithm
    ({"x-amz-server-side-encryption-customer-algorithm": "AES128",
      "x-amz-server-side-encryption-customer-key": base64.b64encode(KEY_A).decode(),
      "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(hashlib.md5(KEY_A).digest()).decode()},
     400, "InvalidEncryptionAlgorithmError"),
    ({"x-amz-server-side-encryption": "AES512"}, 400, "InvalidArgument"),
])
def test_bad_encryption_headers_write_nothing(s3, bucket, headers, status, err):
    def add(params, **_):
        params["headers"].update(headers)
    s3.meta.events.register("before-call.s3.PutObject", add)
    try:
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="bad", Body=b"data")
        assert code(e) == (status, err)
    finally:
        s3.meta.events.unregister("before-call.s3.PutObject", add)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="bad")
    assert code(e)[0] == 404


def test_multipart_sse_c_and_kms(s3, bucket):
    part = os.urandom(5 << 20)
    for enc, rd in ((ssec(KEY_A), ssec(KEY_A)), ({"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "testkey-2"}, {})):
        up = s3.create_multipart_upload(Bucket=bucket, Key="mp", **enc)
        part_enc = enc if "SSECustomerKey" in enc else {}
        p1 = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=part, **part_enc)
        assert p1["ETag"].strip('"') != hashlib.md5(part).hexdigest()
        if part_enc:
            with pytest.raises(ClientError) as e:  # a part with another key, or none: 400 InvalidRequest as S3
                s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=2, Body=b"x",
                               **ssec(KEY_B))
            assert code(e) == (400, "InvalidRequest")
            with pytest.raises(ClientError) as e:
                s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=2, Body=b"x")
            assert code(e) == (400, "InvalidRequest")
        s3.put_object(Bucket=bucket, Key="src", Body=b"tail-bytes")
        p2 = s3.upload_part_copy(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=2,
                                 CopySource={"Bucket": bucket, "Key": "src"}, **part_enc)
        parts = {"Parts": [{"PartNumber": 1, "ETag": p1["ETag"]},
                           {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]}
        if part_enc:  # completing an SSE-C upload needs its key too
            with pytest.raises(ClientError) as e:
                s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"], MultipartUpload=parts)
            assert code(e) == (400, "InvalidRequest")
        done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"], MultipartUpload=parts,
                                            **part_enc)
        assert done["ETag"].endswith('-2"')
        got = s3.get_object(Bucket=bucket, Key="mp", **rd)
        assert got["Body"].read() == part + b"tail-bytes"
        r = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={len(part) - 5}-{len(part) + 3}", **rd)
        assert r["Body"].read() == (part + b"tail-bytes")[len(part) - 5:len(part) + 4]
        assert s3.get_object(Bucket=bucket, Key="mp", PartNumber=2, **rd)["Body"].read() == b"tail-bytes"


def test_bucket_default_encryption(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_encryption(Bucket=bucket)
    assert code(e) == (404, "ServerSideEncryptionConfigurationNotFoundError")
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "testkey-1"}}]})
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "testkey-1"}
    put = s3.put_object(Bucket=bucket, Key="d", Body=b"default")
    assert (put["ServerSideEncryption"], put["SSEKMSKeyId"]) == ("aws:kms", "testkey-1")
    assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"default"
    # an explicit request wins over the default
    assert s3.put_object(Bucket=bucket, Key="e", Body=b"x", ServerSideEncryption="AES256")["ServerSideEncryption"] \
        == "AES256"
    with pytest.raises(ClientError) as e:  # an unknown KMS key is refused, the configuration unchanged
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "nope"}}]})
    assert code(e)[0] == 400
    s3.delete_bucket_encryption(Bucket=bucket)
    assert "ServerSideEncryption" not in s3.put_object(Bucket=bucket, Key="f", Body=b"x")
    assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"default"  # old objects stay readable


def test_batch_and_direct_reads_decrypt_through_the_gateway(cluster, s3, bucket):
    """fsspec's batch reads: an SSE-S3 object is not located for a direct DataNode read (ciphertext); the client
    fetches it through the gateway, which decrypts it. An SSE-C object is that item's error."""
    from epochfs.common.client import S3Client
    import asyncio
    s3.put_object(Bucket=bucket, Key="plain", Body=b"p" * 1000)
    s3.put_object(Bucket=bucket, Key="enc", Body=b"e" * 1000, ServerSideEncryption="AES256")
    s3.put_object(Bucket=bucket, Key="cust", Body=b"c" * 1000, **ssec(KEY_A))

    async def go(direct):
        c = S3Client(cluster.endpoint, MAIN[0], MAIN[1], direct_reads=direct)
        try:
            return await c.batch_get([(bucket, "plain", None, None), (bucket, "enc", 10, 20),
                                      (bucket, "cust", None, None)])
        finally:
            await c.close()
    for direct in (True, False):
        plain, enc, cust = asyncio.run(go(direct))
        assert plain == b"p" * 1000 and enc == b"e" * 10
        assert isinstance(cust, Exception)


def test_batch_ingest_encrypts_as_put_object(cluster, s3, bucket):
    """Batch ingest (POST /_epochfs/put) into a bucket with default encryption stores every item encrypted under its
    own data key, readable through GetObject; the items' ETags stay their MD5 (SSE-S3)."""
    from epochfs.common.client import S3Client
    import asyncio
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    items = [(f"i{j}", os.urandom(1000 + j) + b"x" * cluster.block_size) for j in range(3)]

    async def go():
        c = S3Client(cluster.endpoint, MAIN[0], MAIN[1])
        try:
            return await c.put_many(bucket, items)
        finally:
            await c.close()
    etags = asyncio.run(go())
    for (key, data), etag in zip(items, etags):
        assert etag == hashlib.md5(data).hexdigest()
        got = s3.get_object(Bucket=bucket, Key=key)
        assert got["ServerSideEncryption"] == "AES256" and got["Body"].read() == data
        at_rest = stored_bytes(cluster, bucket, key)
        assert len(at_rest) == len(data) and data[:64] not in at_rest


def test_fsspec_file_reads_encrypted_object(cluster, s3, bucket):
    import fsspec
    data = os.urandom(2 * cluster.block_size + 99)
    s3.put_object(Bucket=bucket, Key="f", Body=data, ServerSideEncryption="AES256")
    fs = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                           skip_instance_cache=True)
    with fs.open(f"{bucket}/f", "rb") as f:
        f.seek(5)
        assert f.read(cluster.block_size) == data[5:5 + cluster.block_size]


def test_aws_cli_sse(cluster, bucket, tmp_path):
    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(70_000))
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY_A)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": MAIN[0], "AWS_SECRET_ACCESS_KEY": MAIN[1],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": cluster.endpoint}

    def aws(*args):
        return subprocess.run(["aws", "s3", *args], env=env, capture_output=True, text=True, timeout=60)
    r = aws("cp", str(src), f"s3://{bucket}/a", "--sse", "AES256")
    assert r.returncode == 0, r.stderr
    r = aws("cp", f"s3://{bucket}/a", str(tmp_path / "a.out"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.out").read_bytes() == src.read_bytes()
    r = aws("cp", str(src), f"s3://{bucket}/c", "--sse-c", "AES256", "--sse-c-key", f"fileb://{key_file}")
    assert r.returncode == 0, r.stderr
    assert aws("cp", f"s3://{bucket}/c", str(tmp_path / "bad.out")).returncode != 0
    r = aws("cp", f"s3://{bucket}/c", str(tmp_path / "c.out"), "--sse-c", "AES256", "--sse-c-key",
            f"fileb://{key_file}")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c.out").read_bytes() == src.read_bytes()


def test_admin_api_and_cli_default_encryption(cluster, s3, bucket):
    import sys

    from epochfs.frontends.cli.admin import AdminClient, AdminError
    admin = AdminClient(cluster.endpoint, MAIN[0], MAIN[1])
    assert admin.call("GET", f"/buckets/{bucket}")["encryption"] is None
    got = admin.call("PATCH", f"/buckets/{bucket}", {"encryption": {"alg": "aws:kms", "kms_key_id": "testkey-2"}})
    assert got["encryption"] == {"alg": "aws:kms", "kms_key_id": "testkey-2"}
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"] == "testkey-2"
    for bad, status in (({"alg": "aws:kms", "kms_key_id": "unknown-key"}, "404"),
                        ({"alg": "AES256", "kms_key_id": "x"}, "422"), ({"alg": "DES"}, "422")):
        with pytest.raises(AdminError, match=status):
            admin.call("PATCH", f"/buckets/{bucket}", {"encryption": bad})
    assert admin.call("GET", f"/buckets/{bucket}")["encryption"]["kms_key_id"] == "testkey-2"  # unchanged
    assert admin.call("PATCH", f"/buckets/{bucket}", {"encryption": None})["encryption"] is None

    env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1], "COLUMNS": "250"}

    def cli(*args, ok=True):
        r = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", "admin", *args], env=env,
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode == 0) == ok, r.stderr
        return r.stdout + r.stderr
    assert "AES256" in cli("buckets", "encryption", bucket, "AES256")
    assert s3.put_object(Bucket=bucket, Key="x", Body=b"x")["ServerSideEncryption"] == "AES256"
    assert "AES256" in next(line for line in cli("buckets").splitlines() if bucket in line)
    assert "aws:kms (testkey-1)" in cli("buckets", "encryption", bucket, "aws:kms", "--kms-key", "testkey-1")
    assert "unknown" in cli("buckets", "encryption", bucket, "rot13", ok=False)
    cli("buckets", "encryption", bucket, "none")
    assert admin.call("GET", "/kms/keys") == {"keys": ["aws/s3", "testkey-1", "testkey-2"], "master_key": True}
    assert "testkey-2" in cli("kms")
    with pytest.raises(ClientError):
        s3.get_bucket_encryption(Bucket=bucket)


@needs_fuse
def test_mount_reads_through_the_gateway_and_refuses_writes(cluster, s3, bucket, tmp_path):
    """The mount reads an SSE-S3 file through the gateway, which decrypts it (a locate of an encrypted file is
    refused, so no ciphertext reaches the mount), for a large file read piecewise and in dataset mode too; it can't
    write one (its writer stores blocks without the key): EACCES, and the object is unchanged. An SSE-C file is
    unreadable there (no key): EACCES."""
    import errno
    big = os.urandom(2 * cluster.block_size + 5000)
    s3.put_object(Bucket=bucket, Key="big", Body=big, ServerSideEncryption="AES256")
    s3.put_object(Bucket=bucket, Key="d/small", Body=b"small-secret", ServerSideEncryption="aws:kms",
                  SSEKMSKeyId="testkey-1")
    s3.put_object(Bucket=bucket, Key="cust", Body=b"c" * 100, **ssec(KEY_A))
    for extra in ((), ("--dataset",)):
        m = Mount(cluster, bucket, tmp_path / f"mnt{len(extra)}", *extra, "--attr-timeout", "0.5",
                  "--cache-dir", str(tmp_path / f"cache{len(extra)}"), log=tmp_path / f"mount{len(extra)}.log")
        try:
            with open(m.path / "big", "rb") as f:
                f.seek(cluster.block_size - 10)
                assert f.read(100) == big[cluster.block_size - 10:cluster.block_size + 90]
            assert (m.path / "big").read_bytes() == big
            assert (m.path / "d" / "small").read_bytes() == b"small-secret"
            with pytest.raises(OSError) as e:
                (m.path / "cust").read_bytes()
            assert e.value.errno == errno.EACCES
            if not extra:
                with pytest.raises(OSError) as e:
                    with open(m.path / "big", "r+b") as f:
                        f.write(b"plaintext")
                assert e.value.errno == errno.EACCES
        finally:
            m.close()
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == big
    # a bucket that encrypts new objects by default takes no file content from the mount (it would be plaintext):
    # refused where the write begins (the create, O_TRUNC, truncate, the first write), so nothing is emptied or
    # half-written; a file kept unchanged, a new one never made, in both create modes
    s3.put_object(Bucket=bucket, Key="plain", Body=b"kept as it was")
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    for extra in ((), ("--writeback",)):
        m = Mount(cluster, bucket, tmp_path / f"mnt-enc{len(extra)}", *extra, "--attr-timeout", "0.5",
                  "--cache-dir", str(tmp_path / f"c-enc{len(extra)}"), log=tmp_path / f"mount-enc{len(extra)}.log")
        try:
            def write(name: str, mode: str) -> None:
                with open(m.path / name, mode, buffering=0) as f:
                    f.write(b" and more")
            for attempt in (lambda: write("new.txt", "wb"), lambda: write("plain", "wb"),  # O_CREAT, O_TRUNC
                            lambda: os.truncate(m.path / "plain", 3), lambda: write("plain", "ab")):
                with pytest.raises(OSError) as e:
                    attempt()
                assert e.value.errno == errno.EACCES, attempt
            assert (m.path / "plain").read_bytes() == b"kept as it was"
            (m.path / "dir").mkdir(exist_ok=True)  # what holds no file content still works
            os.chmod(m.path / "plain", 0o600)
        finally:
            m.close()
        assert s3.get_object(Bucket=bucket, Key="plain")["Body"].read() == b"kept as it was"
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket=bucket, Key="new.txt")
        assert e.value.response["Error"]["Code"] == "404"


# ---------------------------------------------------------------- moto as an oracle
@pytest.fixture(scope="module")
def moto_s3(moto_endpoint):
    """moto's server, for the parts of SSE it implements (the headers S3 answers, bucket encryption documents)."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="a", aws_secret_access_key="b",
                        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))


def _sse_story(s3, bucket: str) -> list:
    """The same steps on both; what S3 answers about encryption, normalized."""
    out = []
    pick = ("ServerSideEncryption", "SSECustomerAlgorithm", "SSECustomerKeyMD5")

    def keep(r):
        return {k: r.get(k) for k in pick if r.get(k) is not None}
    out.append(keep(s3.put_object(Bucket=bucket, Key="s3", Body=b"a" * 100, ServerSideEncryption="AES256")))
    out.append(keep(s3.head_object(Bucket=bucket, Key="s3")))
    g = s3.get_object(Bucket=bucket, Key="s3")
    out.append((keep(g), g["Body"].read()))
    # SSE-C: only the bytes are compared: moto answers without the SSECustomer* headers that S3 sends back
    # (asserted on epochfs in test_sse_c_checks_the_key_on_every_read)
    s3.put_object(Bucket=bucket, Key="c", Body=b"c" * 10, **ssec(KEY_A))
    out.append(s3.get_object(Bucket=bucket, Key="c", **ssec(KEY_A))["Body"].read())
    out.append(keep(s3.put_object(Bucket=bucket, Key="plain", Body=b"p")))
    try:
        s3.get_bucket_encryption(Bucket=bucket)
        out.append("has encryption")
    except ClientError as e:
        out.append(e.response["Error"]["Code"])
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}]})
    out.append(s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"])
    s3.delete_bucket_encryption(Bucket=bucket)
    try:
        s3.get_bucket_encryption(Bucket=bucket)
    except ClientError as e:
        out.append(e.response["Error"]["Code"])
    return out


def test_same_answers_as_moto(s3, bucket, moto_s3):
    moto_s3.create_bucket(Bucket=bucket)
    assert _sse_story(s3, bucket) == _sse_story(moto_s3, bucket)


def test_kms_keys_created_at_run_time(tmp_path):
    """An operator creates a KMS key id through the admin API or the CLI: SSE-KMS may name it at once, it survives a
    gateway restart (the NameNode keeps the id; the material comes from the master key, so objects encrypted under
    it read back), and an unknown id still answers 400 KMS.NotFoundException, changing nothing."""
    import sys

    from cluster import Cluster

    from epochfs.frontends.cli.admin import AdminClient, AdminError
    c = Cluster(tmp_path / "kms", gw_env={"GW_KMS_REFRESH_S": "0.5"}).start()
    try:
        s3, admin = c.s3(), AdminClient(c.endpoint, MAIN[0], MAIN[1])
        s3.create_bucket(Bucket="kms")
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="kms", Key="k", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId="team-a")
        assert code(e) == (400, "KMS.NotFoundException")
        assert "Contents" not in s3.list_objects_v2(Bucket="kms")
        got = admin.call("POST", "/kms/keys", {"key_id": "team-a", "description": "team A's datasets"})
        assert got["key_id"] == "team-a" and got["description"] == "team A's datasets"
        put = s3.put_object(Bucket="kms", Key="k", Body=b"secret", ServerSideEncryption="aws:kms",
                            SSEKMSKeyId="team-a")
        assert (put["ServerSideEncryption"], put["SSEKMSKeyId"]) == ("aws:kms", "team-a")
        for bad, status in (({"key_id": "team-a"}, "409"), ({"key_id": "testkey-1"}, "409"),
                            ({"key_id": "aws/mine"}, "400"), ({"key_id": "a b"}, "422"), ({"key_id": ""}, "422")):
            with pytest.raises(AdminError, match=status):
                admin.call("POST", "/kms/keys", bad)
        env = {**os.environ, "AWS_ENDPOINT_URL": c.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
               "AWS_SECRET_ACCESS_KEY": MAIN[1], "COLUMNS": "250"}
        r = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", "admin", "kms", "create", "team-b"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "team-b created" in r.stdout, r.stderr
        c.stop("gw")
        c.start_gateway()
        s3 = c.s3()
        assert s3.get_object(Bucket="kms", Key="k")["Body"].read() == b"secret"
        s3.put_bucket_encryption(Bucket="kms", ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "team-b"}}]})
        assert s3.put_object(Bucket="kms", Key="d", Body=b"y")["SSEKMSKeyId"] == "team-b"
        assert admin.call("GET", "/kms/keys")["keys"] == ["aws/s3", "team-a", "team-b", "testkey-1", "testkey-2"]
    finally:
        c.close()
