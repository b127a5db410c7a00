"""Per-bucket block size against a real cluster: x-epochfs-block-size on CreateBucket and the admin API set it, and
every writer (S3 PUT, multipart parts, the mount, fsspec) cuts new data into it; existing objects keep their blocks."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import botocore.exceptions
import fsspec
import pytest

from cluster import MAIN
from epochfs.frontends.cli.admin import AdminClient, AdminError
from mounting import Mount, needs_fuse

pytestmark = pytest.mark.integration

KiB, MiB = 1 << 10, 1 << 20
BODY = os.urandom(5 * MiB // 2)  # 2.5 MiB: three blocks of 1 MiB, 1 MiB and 512 KiB in a 1 MiB bucket


def _name() -> str:
    return f"bs-{uuid.uuid4().hex[:12]}"


def create_bucket(s3, name: str, block_size: str | None) -> None:
    """CreateBucket with epochfs's x-epochfs-block-size header (signed, as any header a client adds)."""
    def add(request, **_):
        request.headers["x-epochfs-block-size"] = block_size
    s3.meta.events.register("before-sign.s3.CreateBucket", add)
    try:
        s3.create_bucket(Bucket=name)
    finally:
        s3.meta.events.unregister("before-sign.s3.CreateBucket", add)


def block_sizes(cluster, bucket: str, key: str) -> list[int]:
    """The sizes of the blocks the NameNode holds for the object, in order."""
    return [blk.size for blk in cluster.nn.stat(bucket, key).obj.blocks]


@pytest.fixture(scope="module")
def admin(cluster):
    return AdminClient(cluster.endpoint, MAIN[0], MAIN[1])


@pytest.fixture
def mib_bucket(cluster, s3):
    name = _name()
    create_bucket(s3, name, str(MiB))
    return name


def test_create_bucket_header_sets_the_block_size_of_put(cluster, s3, admin, mib_bucket):
    assert admin.call("GET", f"/buckets/{mib_bucket}")["block_size"] == MiB
    s3.put_object(Bucket=mib_bucket, Key="k", Body=BODY)
    assert block_sizes(cluster, mib_bucket, "k") == [MiB, MiB, MiB // 2]
    assert s3.get_object(Bucket=mib_bucket, Key="k")["Body"].read() == BODY
    # a bucket created without the header takes the cluster's default (4 MiB here): one block
    plain = _name()
    s3.create_bucket(Bucket=plain)
    s3.put_object(Bucket=plain, Key="k", Body=BODY)
    assert block_sizes(cluster, plain, "k") == [len(BODY)]
    assert admin.call("GET", f"/buckets/{plain}")["block_size"] == cluster.block_size


def test_multipart_parts_are_cut_into_the_bucket_block_size(cluster, s3, mib_bucket):
    up = s3.create_multipart_upload(Bucket=mib_bucket, Key="mp")["UploadId"]
    first, last = os.urandom(5 * MiB), BODY
    etags = [s3.upload_part(Bucket=mib_bucket, Key="mp", UploadId=up, PartNumber=n, Body=b)["ETag"]
             for n, b in ((1, first), (2, last))]
    s3.complete_multipart_upload(Bucket=mib_bucket, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags)]})
    assert block_sizes(cluster, mib_bucket, "mp") == [MiB] * 5 + [MiB, MiB, MiB // 2]
    assert s3.get_object(Bucket=mib_bucket, Key="mp")["Body"].read() == first + last


@pytest.mark.parametrize("value", ["1000", "0", "64MiB", str(64 * MiB), "-1048576", "1048576.5", ""])
def test_invalid_block_size_is_refused_and_creates_nothing(cluster, s3, value):
    name = _name()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        create_bucket(s3, name, value)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert e.value.response["Error"]["Code"] == "InvalidArgument"
    assert "block size" in e.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_fsspec_writes_take_the_bucket_block_size(cluster, mib_bucket):
    fs = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                           skip_instance_cache=True)
    fs.pipe(f"{mib_bucket}/piped", BODY)
    with fs.open(f"{mib_bucket}/opened", "wb") as f:
        f.write(BODY[:MiB])
        f.write(BODY[MiB:])
    for key in ("piped", "opened"):
        assert block_sizes(cluster, mib_bucket, key) == [MiB, MiB, MiB // 2]
        assert fs.cat(f"{mib_bucket}/{key}") == BODY


@needs_fuse
def test_mount_writes_take_the_bucket_block_size(cluster, mib_bucket, tmp_path):
    m = Mount(cluster, mib_bucket, tmp_path / "mnt", "--cache-dir", str(tmp_path / "cache"),
              log=tmp_path / "mount.log")
    try:
        (m.path / "f").write_bytes(BODY)
        assert block_sizes(cluster, mib_bucket, "f") == [MiB, MiB, MiB // 2]
        with open(m.path / "f", "ab") as f:  # an append rewrites the short last block with the new bytes
            f.write(BODY[:MiB])
        assert block_sizes(cluster, mib_bucket, "f") == [MiB, MiB, MiB, MiB // 2]
    finally:
        m.close()
    assert cluster.s3().get_object(Bucket=mib_bucket, Key="f")["Body"].read() == BODY + BODY[:MiB]


def test_admin_api_creates_with_and_changes_the_block_size(cluster, s3, admin):
    name = _name()
    b = admin.call("POST", "/buckets", {"name": name, "block_size": MiB, "replication": 2})
    assert (b["name"], b["block_size"], b["replication"], b["owner"]) == (name, MiB, 2, s3.list_buckets()[
        "Owner"]["ID"])
    s3.put_object(Bucket=name, Key="old", Body=BODY)
    assert block_sizes(cluster, name, "old") == [MiB, MiB, MiB // 2]

    assert admin.call("PATCH", f"/buckets/{name}", {"block_size": 2 * MiB})["block_size"] == 2 * MiB
    s3.put_object(Bucket=name, Key="new", Body=BODY)  # the next write takes the new size
    assert block_sizes(cluster, name, "new") == [2 * MiB, MiB // 2]
    assert block_sizes(cluster, name, "old") == [MiB, MiB, MiB // 2]  # existing objects keep their blocks
    assert s3.get_object(Bucket=name, Key="old")["Body"].read() == BODY

    for bad in (1000, 64 * MiB, 0):  # refused; nothing changes
        with pytest.raises(AdminError, match="HTTP 422"):
            admin.call("PATCH", f"/buckets/{name}", {"block_size": bad})
        with pytest.raises(AdminError, match="HTTP 422"):
            admin.call("POST", "/buckets", {"name": _name(), "block_size": bad})
    assert admin.call("GET", f"/buckets/{name}")["block_size"] == 2 * MiB
    with pytest.raises(AdminError, match="HTTP 409"):
        admin.call("POST", "/buckets", {"name": name})
    with pytest.raises(AdminError, match="HTTP 400"):
        admin.call("POST", "/buckets", {"name": "a..b"})

    env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1], "COLUMNS": "250"}
    out = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", "admin", "buckets"], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "block, replicas, writes" in out
    assert "2.0 MiB" in next(line for line in out.splitlines() if name in line)
