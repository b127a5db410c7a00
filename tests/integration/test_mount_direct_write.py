"""The mount's streamed writes go straight to the DataNodes (write tokens from the gateway, which commits the file by
inode), and through the gateway when the DataNodes can't be reached from the mount (for real: the mount runs in a
network namespace whose routes to the DataNodes are blackholes)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest
import xxhash

from cluster import MAIN, Cluster
from mounting import FUSERMOUNT, Mount, fs_requests, needs_fuse
from netns import hosts_or_skip, ip

pytestmark = [pytest.mark.integration, needs_fuse]

SUBNET = "10.231.85"  # test_deploy.py .77/.79, test_partition.py .78, test_direct_writes_fallback.py .81


def _write(path, chunks: list[bytes]) -> None:
    with open(path, "wb") as f:
        for c in chunks:
            f.write(c)


def test_a_large_file_is_stored_on_the_datanodes_by_the_mount(cluster, mnt, s3, bucket):
    """20 MiB written front to back: the content never crosses the gateway (no file write through it, one direct
    commit), S3 reads the same bytes; an overwrite in place later goes through the gateway's layout commit as before
    and keeps the untouched blocks."""
    chunks = [os.urandom(1 << 20) for _ in range(20)]
    before = fs_requests(cluster)
    _write(mnt.path / "big.bin", chunks)
    after = fs_requests(cluster)
    assert after.get("write_direct", 0) - before.get("write_direct", 0) == 1
    assert after.get("write", 0) == before.get("write", 0)
    data = b"".join(chunks)
    got = s3.get_object(Bucket=bucket, Key="big.bin")
    assert got["Body"].read() == data
    # 5 blocks of 4 MiB: the multipart form over their XXH3-128s (the DataNodes hash no MD5 for a file of several)
    digests = b"".join(xxhash.xxh3_128_digest(data[o:o + (4 << 20)]) for o in range(0, len(data), 4 << 20))
    assert got["ETag"] == f'"{hashlib.md5(digests).hexdigest()}-5"'

    assert (mnt.path / "big.bin").read_bytes() == data
    with open(mnt.path / "big.bin", "r+b") as f:
        f.seek(5 << 20)
        f.write(b"x" * 10)
    data = data[:5 << 20] + b"x" * 10 + data[(5 << 20) + 10:]
    assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == data


def test_a_stream_given_up_commits_nothing_of_its_own(cluster, mnt, s3, bucket):
    """A direct stream cancelled by a write behind what was sent (here: a rewrite of the start) commits nothing of
    its own (its blocks are given back); the file ends as written, every byte (the upload that takes over reads the
    local copy, whose pages the stream dropped from the page cache behind it)."""
    path = mnt.path / "re.bin"
    data = os.urandom(24 << 20)
    with open(path, "wb") as f:
        f.write(data)
        f.seek(0)
        f.write(b"start")
        f.seek(0, 2)
        f.write(b"end")
    body = s3.get_object(Bucket=bucket, Key="re.bin")["Body"].read()
    assert body == b"start" + data[5:] + b"end"


def test_streams_go_through_the_gateway_when_the_datanodes_cant_be_reached(tmp_path):
    with hosts_or_skip(SUBNET, {"client": 2, "dn1": 3, "dn2": 4, "dn3": 5}) as h:
        here = (h.bridge_addr, [])
        c = Cluster(tmp_path, hosts={"nn": here, "gw": here,
                                     **{f"dn{i}": (h.addr(f"dn{i}"), h.exec_prefix(f"dn{i}")) for i in (1, 2, 3)}})
        mp = tmp_path / "mnt"
        mp.mkdir()
        log = open(tmp_path / "mount.log", "ab")
        proc = None
        try:
            c.start()
            for i in (1, 2, 3):
                ip("-n", h.ns["client"], "route", "add", "blackhole", f"{h.addr(f'dn{i}')}/32")
            s3 = c.s3()
            s3.create_bucket(Bucket="away")
            # the mount in the client's network namespace only (nsenter --net), so its mount is seen here
            proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{h.ns['client']}", sys.executable, "-m",
                                     "epochfs.frontends.cli.main", "mount", "-f", "away", str(mp), "--endpoint",
                                     c.endpoint, "--access-key", MAIN[0], "--secret-key", MAIN[1]],
                                    stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while not os.path.ismount(mp):
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mount.log").read_text()
                time.sleep(0.05)
            chunks = [os.urandom(1 << 20) for _ in range(18)]
            before = fs_requests(c)
            _write(mp / "big.bin", chunks)
            after = fs_requests(c)
            assert after.get("write_direct", 0) == before.get("write_direct", 0)
            assert after.get("write", 0) - before.get("write", 0) >= 1
            assert s3.get_object(Bucket="away", Key="big.bin")["Body"].read() == b"".join(chunks)
            assert (mp / "big.bin").read_bytes() == b"".join(chunks)
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if os.path.ismount(mp):
                subprocess.call([FUSERMOUNT, "-u", "-z", str(mp)])
            log.close()
            c.close()
