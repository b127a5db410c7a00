"""The NameNode as a state machine: the commands a real cluster logged (NN_COMMAND_LOG), replayed onto an empty
RocksDB store, give the NameNode's own store back, key for key and byte for byte."""
from __future__ import annotations

import time
import uuid

import pytest

from cluster import Cluster
from epochfs.common.kv import RocksKV
from epochfs.frontends.cli.admin import AdminClient
from epochfs.namenode import commands as cmds
from epochfs.namenode.metastore import MetaStore
from mounting import Mount, needs_fuse

from cluster import MAIN

pytestmark = pytest.mark.integration


def dump(kv) -> dict[bytes, bytes]:
    return dict(kv.scan(b"", None))


@needs_fuse
def test_replayed_command_log_rebuilds_the_namenode_store(tmp_path):
    log_path = tmp_path / "commands.log"
    c = Cluster(tmp_path / "c", block_size=64 << 10, free_grace_s="0",
                nn_env={"NN_COMMAND_LOG": str(log_path), "NN_PENDING_GRACE_S": "1", "NN_MIN_PART_SIZE": "1000"}).start()
    try:
        s3 = c.s3()
        b = f"r-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=b)
        s3.put_object(Bucket=b, Key="dir/a", Body=b"one" * 50_000)           # PUT (3 blocks)
        s3.put_object(Bucket=b, Key="dir/a", Body=b"two")                    # overwrite: old blocks freed
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
        s3.put_object(Bucket=b, Key="v", Body=b"v1")
        s3.put_object(Bucket=b, Key="v", Body=b"v2")
        s3.delete_object(Bucket=b, Key="v")                                  # versioned delete: a delete marker
        up = s3.create_multipart_upload(Bucket=b, Key="mpu")["UploadId"]
        etags = [s3.upload_part(Bucket=b, Key="mpu", UploadId=up, PartNumber=n, Body=bytes([n]) * 100_000)["ETag"]
                 for n in (1, 2)]
        s3.complete_multipart_upload(Bucket=b, Key="mpu", UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags)]})
        AdminClient(c.endpoint, MAIN[0], MAIN[1]).call("PATCH", f"/buckets/{b}", {"quota_bytes": 1 << 30})
        m = Mount(c, b, tmp_path / "mnt", log=tmp_path / "mount.log")
        try:
            (m.path / "dir" / "a").rename(m.path / "dir" / "renamed")       # rename in the mount
            (m.path / "made").mkdir()
            (m.path / "made" / "f").write_bytes(b"written through the mount")
        finally:
            m.close()
        assert s3.get_object(Bucket=b, Key="dir/renamed")["Body"].read() == b"two"
        c.nn.allocate(b, count=2)                                            # an upload that never commits
        time.sleep(1.5)
        assert c.nn.gc_once().expired >= 2                                   # GC: its blocks expire
        c.collect_garbage()                                                  # and the DataNodes delete them
        c.stop("nn")
        got = list(cmds.read_log(log_path))
        ops = {x.__struct_config__.tag for x in got}
        assert {"init_root", "assign_node_id", "save_node", "create_bucket", "allocate", "put_object",
                "delete_object", "create_upload", "put_part", "complete_upload", "update_bucket", "rename",
                "mkdir", "commit", "expire_pending", "garbage_done"} <= ops, ops

        original = RocksKV.open(c.root / "nn" / "meta")
        try:
            want = dump(original)
        finally:
            original.close()
        replayed = RocksKV.open(tmp_path / "replayed")
        try:
            meta = MetaStore(replayed, free_grace_s=0, init_root=False)  # the log starts with the InitRoot
            for x in got:
                meta.execute(x)
            have = dump(replayed)
        finally:
            replayed.close()
        assert sorted(have) == sorted(want)
        assert [k for k in want if have[k] != want[k]] == []
        assert len(want) > 20
    finally:
        c.close()
