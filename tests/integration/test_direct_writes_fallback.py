"""Direct writes where the client can't reach the DataNodes, and a client killed before its commit.

Fallback, for real: the DataNodes run in network namespaces of their own; the client runs in another one whose
routes to the DataNodes' addresses are blackholes, so it reaches the gateway (and the NameNode's bridge address) but
no DataNode, as a laptop outside a cluster's network would. `epochfs cp` and fsspec then write through the gateway,
and the same commands from here (where the DataNodes can be reached) write directly."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from cluster import MAIN, Cluster
from netns import hosts_or_skip, ip

pytestmark = pytest.mark.integration

SUBNET = "10.231.81"  # test_deploy.py uses .77 and .79, test_partition.py .78


def _env(c: Cluster) -> dict:
    return {**os.environ, "AWS_ENDPOINT_URL": c.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
            "AWS_SECRET_ACCESS_KEY": MAIN[1]}


FSSPEC_WRITES = textwrap.dedent("""
    import os, sys, fsspec
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True)
    b = sys.argv[1]
    fs.pipe({f"{b}/p/{i}": bytes([i]) * (1000 + i) for i in range(20)})
    fs.pipe_file(f"{b}/p/mid", b"m" * (3 << 20))
    with fs.open(f"{b}/p/stream", "wb") as f:
        for i in range(24):
            f.write(bytes([i]) * (1 << 20))
    c = fs.client
    print(c.direct_writes, c.gateway_writes)
""")


def _expected_fsspec() -> dict[str, bytes]:
    out = {f"p/{i}": bytes([i]) * (1000 + i) for i in range(20)}
    out["p/mid"] = b"m" * (3 << 20)
    out["p/stream"] = b"".join(bytes([i]) * (1 << 20) for i in range(24))
    return out


def test_writes_go_through_the_gateway_when_the_datanodes_cant_be_reached(tmp_path):
    with hosts_or_skip(SUBNET, {"client": 2, "dn1": 3, "dn2": 4, "dn3": 5}) as h:
        here = (h.bridge_addr, [])
        c = Cluster(tmp_path, hosts={"nn": here, "gw": here,
                                     **{f"dn{i}": (h.addr(f"dn{i}"), h.exec_prefix(f"dn{i}")) for i in (1, 2, 3)}})
        try:
            c.start()
            for i in (1, 2, 3):
                ip("-n", h.ns["client"], "route", "add", "blackhole", f"{h.addr(f'dn{i}')}/32")
            s3 = c.s3()
            src = tmp_path / "src"
            src.mkdir()
            files = {f"f{i}.bin": os.urandom(2000 + i) for i in range(30)}
            files["big.bin"] = os.urandom(20 << 20)
            for k, v in files.items():
                (src / k).write_bytes(v)
            for where, prefix, bucket in (("outside", h.exec_prefix("client"), "away"), ("inside", [], "near")):
                s3.create_bucket(Bucket=bucket)
                p = subprocess.run([*prefix, sys.executable, "-m", "epochfs.frontends.cli.main", "cp", str(src),
                                    f"epochfs://{bucket}/cp"], env=_env(c), capture_output=True, text=True,
                                   timeout=300)
                assert p.returncode == 0, p.stderr
                direct = 0 if where == "outside" else 31
                assert f"31 copied, 0 unchanged ({direct} of 31 uploads straight to the DataNodes)" in p.stderr
                for k, v in files.items():
                    assert s3.get_object(Bucket=bucket, Key=f"cp/{k}")["Body"].read() == v
                p = subprocess.run([*prefix, sys.executable, "-c", FSSPEC_WRITES, bucket], env=_env(c),
                                   capture_output=True, text=True, timeout=300)
                assert p.returncode == 0, p.stderr
                d, g = map(int, p.stdout.split())
                assert (d, g) == ((0, 22) if where == "outside" else (22, 0)), (d, g, p.stderr[-2000:])
                for k, v in _expected_fsspec().items():
                    assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == v
        finally:
            c.close()


KILLED = textwrap.dedent("""
    import asyncio, os, sys, time
    from epochfs.common.client import S3Client
    async def go():
        async with S3Client() as c:
            up = c.direct.upload(sys.argv[1], "never", window=1)
            for i in range(3):
                await up.write(os.urandom(4 << 20))
            await up.drain()
            print(" ".join(str(r.id) for r in up.receipts), flush=True)
            time.sleep(600)
    asyncio.run(go())
""")


def test_a_writer_killed_before_its_commit_leaves_nothing_visible_and_its_blocks_are_collected(tmp_path):
    c = Cluster(tmp_path, nn_env={"NN_PENDING_GRACE_S": "3"})
    try:
        c.start()
        s3 = c.s3()
        s3.create_bucket(Bucket="killed")
        p = subprocess.Popen([sys.executable, "-c", KILLED, "killed"], env=_env(c), stdout=subprocess.PIPE, text=True)
        try:
            ids = {int(x) for x in p.stdout.readline().split()}
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        assert len(ids) == 3  # three blocks stored, on their primaries at least
        c.replicate_once()
        stored = c.datanode_blocks()
        assert all(any(i in have for have in stored.values()) for i in ids)
        assert "Contents" not in s3.list_objects_v2(Bucket="killed")
        assert ids <= set(c.nn.pending())
        time.sleep(3.5)
        c.collect_garbage()  # the pending allocations expire and become garbage: the copies are deleted
        assert not ids & set(c.nn.pending())
        deadline = time.monotonic() + 20
        while any(ids & have for have in c.datanode_blocks().values()):
            assert time.monotonic() < deadline, c.datanode_blocks()
            time.sleep(0.3)
        assert "Contents" not in s3.list_objects_v2(Bucket="killed")
    finally:
        c.close()
