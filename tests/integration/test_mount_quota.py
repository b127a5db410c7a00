"""A bucket's quota through the mount: a change that would exceed it fails with EDQUOT, as on a local file system with
quotas, and leaves what was stored before as it was."""
from __future__ import annotations

import errno

import pytest

from cluster import MAIN
from epochfs.frontends.cli.admin import AdminClient
from mounting import needs_fuse

pytestmark = [pytest.mark.integration, needs_fuse]


@pytest.fixture
def admin(cluster):
    return AdminClient(cluster.endpoint, MAIN[0], MAIN[1])


def test_a_write_over_the_byte_quota_fails_at_close_with_edquot(cluster, mnt, s3, bucket, admin):
    admin.call("PATCH", f"/buckets/{bucket}", {"quota_bytes": 1000})
    (mnt.path / "a.bin").write_bytes(b"a" * 600)
    f = open(mnt.path / "b.bin", "wb")
    f.write(b"b" * 600)  # kept locally until close: 600 + 600 > 1000
    with pytest.raises(OSError) as e:
        f.close()
    assert e.value.errno == errno.EDQUOT
    assert s3.get_object(Bucket=bucket, Key="a.bin")["Body"].read() == b"a" * 600
    assert s3.head_object(Bucket=bucket, Key="b.bin")["ContentLength"] == 0  # created, its content refused
    assert admin.call("GET", f"/buckets/{bucket}")["bytes"] == 600
    with open(mnt.path / "a.bin", "r+b") as f:  # a rewrite within the quota is fine
        f.write(b"c" * 100)
    assert s3.get_object(Bucket=bucket, Key="a.bin")["Body"].read() == b"c" * 100 + b"a" * 500


def test_a_file_over_the_object_quota_is_refused_at_create_with_edquot(cluster, mnt, s3, bucket, admin):
    admin.call("PATCH", f"/buckets/{bucket}", {"quota_objects": 1})
    (mnt.path / "one").write_bytes(b"1")
    with pytest.raises(OSError) as e:
        open(mnt.path / "two", "wb").close()
    assert e.value.errno == errno.EDQUOT
    assert not (mnt.path / "two").exists()
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["one"]
