"""Local reads on a real cluster (common/localread.py): the gateway, `epochfs://` and the mount, on the DataNodes'
machine, read the block files themselves through the DataNodes' local sockets; with EPOCHFS_LOCAL_READS=0, or
without a socket, everything goes over RPC as before. Every read gives the same bytes."""
from __future__ import annotations

import os
import re

import fsspec
import httpx
import pytest

from cluster import MAIN, Cluster
from epochfs.common import localread
from mounting import Mount

pytestmark = pytest.mark.integration

BLOCK = 1 << 20


def _served(cluster) -> int:
    """Reads the DataNodes served through their local sockets, in all."""
    total = 0
    for i in range(1, cluster.n_dn + 1):
        if f"dn{i}" not in cluster.procs:
            continue
        text = httpx.get(f"http://{cluster.addr(f'dn{i}')}:{cluster.ports[f'dn{i}'][0]}/metrics").text
        total += int(float(re.search(r"^epochfs_datanode_local_reads_total (\S+)$", text, re.M).group(1)))
    return total


def test_the_gateway_fsspec_and_the_mount_read_the_datanodes_files_themselves(cluster, bucket, s3, env, tmp_path):
    body = os.urandom(5 * (4 << 20) + 12345)  # several blocks of the bucket's size, the last one short
    s3.put_object(Bucket=bucket, Key="big", Body=body)
    sockets = sorted(os.listdir(os.environ[localread.ENV_DIR]))
    assert {f"dn-{cluster.addr(f'dn{i}')}-{cluster.ports[f'dn{i}'][1]}.sock" for i in range(1, 4)} <= set(sockets)

    before = _served(cluster)
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == body
    r = s3.get_object(Bucket=bucket, Key="big", Range="bytes=4194000-9000000")["Body"].read()
    assert r == body[4194000:9000001]
    after_s3 = _served(cluster)
    # the GET's five whole blocks and the range's two large pieces; its last block (12,345 bytes) and the range's
    # first piece (304 bytes) go over RPC (clients.LOCAL_MIN)
    assert after_s3 - before == 5 + 2

    fs = fsspec.filesystem("epochfs", skip_instance_cache=True)
    assert fs.cat(f"{bucket}/big") == body
    with fs.open(f"{bucket}/big", "rb") as f:
        f.seek(7_000_003)
        assert f.read(3_000_000) == body[7_000_003:10_000_003]
    after_fsspec = _served(cluster)
    assert after_fsspec > after_s3

    m = Mount(cluster, bucket, tmp_path / "mnt", "--cache-dir", str(tmp_path / "cache"), log=tmp_path / "mount.log")
    try:
        assert (m.path / "big").read_bytes() == body
    finally:
        m.close()
    assert _served(cluster) > after_fsspec


def test_with_local_reads_off_everything_goes_over_rpc(tmp_path, monkeypatch):
    monkeypatch.setenv(localread.ENV_OFF, "0")  # the gateway's, the tests' own clients' and the mount's
    c = Cluster(tmp_path / "c", block_size=BLOCK).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="off")
        body = os.urandom(3 * BLOCK + 7)
        s3.put_object(Bucket="off", Key="k", Body=body)
        assert s3.get_object(Bucket="off", Key="k")["Body"].read() == body
        monkeypatch.setenv("AWS_ENDPOINT_URL", c.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", MAIN[0])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MAIN[1])
        assert fsspec.filesystem("epochfs", skip_instance_cache=True).cat("off/k") == body
        assert _served(c) == 0
        # the DataNodes still serve local reads: a reader that has them on uses them
        monkeypatch.setenv(localread.ENV_OFF, "1")
        assert fsspec.filesystem("epochfs", skip_instance_cache=True).cat("off/k") == body
        assert _served(c) >= 3
    finally:
        c.close()
