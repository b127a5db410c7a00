"""The mount's caching (dataset mode, kernel page cache across opens) and its behaviour when the gateway goes away."""
from __future__ import annotations

import errno
import os
import random
import signal
import time

import pytest

from cluster import Cluster
from mounting import Mount, fs_requests, needs_fuse

pytestmark = [pytest.mark.integration, needs_fuse]


def _epoch(root, files, rng) -> None:
    """One training epoch: list the tree, then read every sample once in a new random order."""
    listed = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert listed == sorted(files)
    order = list(files)
    rng.shuffle(order)
    for name in order:
        assert (root / name).read_bytes() == files[name]


def test_dataset_mode_makes_no_requests_after_the_first_epoch(cluster, bucket, s3, tmp_path):
    rng = random.Random(1)
    files = {f"shard{i % 4}/sample{i:03d}.bin": rng.randbytes(rng.randrange(1_000, 120_000)) for i in range(60)}
    for k, v in files.items():
        s3.put_object(Bucket=bucket, Key=f"train/{k}", Body=v)
    m = Mount(cluster, f"{bucket}/train", tmp_path / "ds", "--dataset", "--cache", "none", "--cache-mem", "64M",
              log=tmp_path / "mount.log")
    try:
        _epoch(m.path, files, rng)
        after_first = fs_requests(cluster)
        assert after_first.get("lookup", 0) + after_first.get("readdir", 0) > 0
        for _ in range(2):
            _epoch(m.path, files, rng)
            assert fs_requests(cluster) == after_first  # no metadata and (all cached) no data requests
        with pytest.raises(OSError) as e:
            (m.path / "new").write_bytes(b"x")
        assert e.value.errno == errno.EROFS
    finally:
        m.close()


def test_dataset_mode_prefetches_a_directory_in_batches(cluster, bucket, s3, tmp_path):
    """Epoch 1 fetches each directory's small files a batch at a time, not one request per file; a cache without
    room for them stops the prefetch and every file is still read right."""
    rng = random.Random(2)
    files = {f"shard{i % 3}/s{i:03d}.bin": rng.randbytes(rng.randrange(1, 50_000)) for i in range(48)}
    for k, v in files.items():
        s3.put_object(Bucket=bucket, Key=f"pf/{k}", Body=v)
    for cache_mem, most_reads in (("64M", 12), ("60K", len(files))):
        reads = fs_requests(cluster).get("read", 0)
        m = Mount(cluster, f"{bucket}/pf", tmp_path / f"pf{cache_mem}", "--dataset", "--cache-mem", cache_mem,
                  "--prefetch", "8", log=tmp_path / "mount.log")
        try:
            _epoch(m.path, files, rng)
        finally:
            m.close()
        assert fs_requests(cluster).get("read", 0) - reads <= most_reads


def test_page_cache_is_kept_across_opens_of_an_unchanged_file(cluster, bucket, s3, tmp_path):
    s3.put_object(Bucket=bucket, Key="f.bin", Body=os.urandom(300_000))
    m = Mount(cluster, bucket, tmp_path / "pc", "--cache", "off", log=tmp_path / "mount.log")
    try:
        data = (m.path / "f.bin").read_bytes()
        reads = fs_requests(cluster).get("read", 0)
        for _ in range(3):
            assert (m.path / "f.bin").read_bytes() == data  # revalidated at open, served by the kernel
        assert fs_requests(cluster).get("read", 0) == reads
        s3.put_object(Bucket=bucket, Key="f.bin", Body=b"changed")
        time.sleep(1.5)  # the attribute timeout
        assert (m.path / "f.bin").read_bytes() == b"changed"
    finally:
        m.close()


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("gwdown")).start()
    yield c
    c.close()


def test_gateway_gone_gives_eio_then_recovers(own_cluster, tmp_path):
    s3 = own_cluster.s3()
    s3.create_bucket(Bucket="gone")
    s3.put_object(Bucket="gone", Key="a", Body=b"a")
    m = Mount(own_cluster, "gone", tmp_path / "g", "--timeout", "2", "--attr-timeout", "0", "--entry-timeout", "0",
              log=tmp_path / "mount.log")
    gw = own_cluster.procs["gw"]
    try:
        assert (m.path / "a").read_bytes() == b"a"
        gw.send_signal(signal.SIGSTOP)  # alive but silent: only a timeout can end the wait
        t0 = time.monotonic()
        with pytest.raises(OSError) as e:
            os.stat(m.path / "a")
        assert e.value.errno == errno.EIO
        assert time.monotonic() - t0 < 15
        gw.send_signal(signal.SIGCONT)
        assert (m.path / "a").read_bytes() == b"a"
        own_cluster.stop("gw")  # gone: refused at once
        with pytest.raises(OSError) as e:
            os.listdir(m.path)
        assert e.value.errno == errno.EIO
        own_cluster.start_gateway()
        assert os.listdir(m.path) == ["a"]
    finally:
        if gw.poll() is None:
            gw.send_signal(signal.SIGCONT)
        m.close()
