"""The mount reads file data straight from the DataNodes (the gateway only says where the blocks are), and through
the gateway when a DataNode can't be reached."""
from __future__ import annotations

import asyncio
import os
import random
import time

import httpx
import pytest

from cluster import MAIN, Cluster
from epochfs.common.blocks import pick_replica
from epochfs.common.client import S3Client
from mounting import Mount, fs_requests, needs_fuse

pytestmark = [pytest.mark.integration, needs_fuse]


def _shuffled_epoch(m: Mount, files: dict[str, bytes], rng: random.Random) -> None:
    order = list(files)
    rng.shuffle(order)
    for name in order:
        assert (m.path / name).read_bytes() == files[name]


def test_large_files_are_read_from_the_datanodes(cluster, bucket, s3, tmp_path):
    big = os.urandom(10 << 20)  # three 4 MiB blocks
    s3.put_object(Bucket=bucket, Key="direct/big.bin", Body=big)
    before = fs_requests(cluster)
    m = Mount(cluster, f"{bucket}/direct", tmp_path / "d", "--cache", "none", log=tmp_path / "mount.log")
    try:
        with open(m.path / "big.bin", "rb", buffering=0) as f:
            assert f.read() == big
            f.seek(5_000_000)
            assert f.read(3_000_000) == big[5_000_000:8_000_000]
    finally:
        m.close()
    after = fs_requests(cluster)
    assert after.get("read", 0) == before.get("read", 0)  # no byte through the gateway
    assert 1 <= after.get("locate", 0) - before.get("locate", 0) <= 2


def test_dataset_epoch_reads_small_files_without_gateway_reads(cluster, bucket, s3, tmp_path):
    rng = random.Random(5)
    files = {f"s{i % 3}/f{i:03d}": rng.randbytes(rng.randrange(1, 90_000)) for i in range(45)}
    for k, v in files.items():
        s3.put_object(Bucket=bucket, Key=f"ds2/{k}", Body=v)
    before = fs_requests(cluster)
    for extra in (("--prefetch", "8"), ("--prefetch", "0")):  # in batches, and one file at a time
        m = Mount(cluster, f"{bucket}/ds2", tmp_path / f"ds{extra[1]}", "--dataset", *extra, log=tmp_path / "m.log")
        try:
            _shuffled_epoch(m, files, rng)
        finally:
            m.close()
    assert fs_requests(cluster).get("read", 0) == before.get("read", 0)


def datanode_calls(cluster, op: str) -> float:
    """RPC calls `op` served, summed over the DataNodes (their /metrics); for read_tokened, with the reads served
    through their local sockets (common/localread.py), which a reader on their machine uses for its large reads."""
    total = 0.0
    names = [f'epochfs_rpc_calls_total{{op="{op}"}} ']
    if op == "read_tokened":
        names.append("epochfs_datanode_local_reads_total ")
    for name, ports in cluster.ports.items():
        if name.startswith("dn") and name in cluster.procs:
            for line in httpx.get(f"http://{cluster.addr(name)}:{ports[0]}/metrics").text.splitlines():
                if line.startswith(tuple(names)):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_dataset_read_that_misses_fetches_its_files_group(cluster, bucket, s3, tmp_path):
    """In dataset mode a file not yet cached is fetched with the `prefetch` files around it in its directory, one
    DataNode call per node: a shuffled epoch of 48 files in groups of 8 costs at most 6 x 3 calls, not 48."""
    rng = random.Random(6)
    files = {f"g{i % 3}/f{i:03d}": rng.randbytes(rng.randrange(1, 60_000)) for i in range(48)}
    for k, v in files.items():
        s3.put_object(Bucket=bucket, Key=f"grp/{k}", Body=v)
    calls = datanode_calls(cluster, "read_tokened")
    m = Mount(cluster, f"{bucket}/grp", tmp_path / "g", "--dataset", "--prefetch", "8", log=tmp_path / "m.log")
    try:
        _shuffled_epoch(m, files, rng)
    finally:
        m.close()
    assert 0 < datanode_calls(cluster, "read_tokened") - calls <= 6 * 3


def _front_to_back(path) -> bytes:
    """The file read front to back in 128 KiB reads; then the kernel drops its pages of it (as under memory pressure),
    so that the next read reaches the mount."""
    with open(path, "rb", buffering=0) as f:
        data = b"".join(iter(lambda: f.read(128 << 10), b""))
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return data


def _at_random(path, size: int, chunk: int) -> dict[int, bytes]:
    """Every other chunk-sized piece of the file in a shuffled order (none adjoins another, no kernel readahead);
    pages dropped after."""
    with open(path, "rb", buffering=0) as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        order = list(range(0, size // chunk, 2))
        random.Random(len(order)).shuffle(order)
        got = {i * chunk: os.pread(f.fileno(), chunk, i * chunk) for i in order}
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return got


def test_a_file_read_front_to_back_is_not_kept_twice(cluster, bucket, s3, tmp_path):
    """The kernel's page cache keeps what a reader reads front to back: the block cache's memory does not hold those
    chunks as well (a read after the kernel dropped them goes to the DataNodes again), a disk tier does, and chunks
    read at random offsets stay in memory as before (where the none policy beats the kernel's LRU)."""
    mib = 1 << 20
    big = os.urandom(12 * mib)
    s3.put_object(Bucket=bucket, Key="stream/big.bin", Body=big)
    small_chunks = ("--chunk-size", "1M", "--readahead", "2")  # 12 chunks: a stream past the readahead span
    m = Mount(cluster, f"{bucket}/stream", tmp_path / "s", "--cache", "none", "--cache-mem", "64M", *small_chunks,
              log=tmp_path / "m.log")
    try:
        calls = datanode_calls(cluster, "read_tokened")
        assert _front_to_back(m.path / "big.bin") == big
        first = datanode_calls(cluster, "read_tokened") - calls
        assert first >= 12
        calls += first
        assert _front_to_back(m.path / "big.bin") == big
        assert datanode_calls(cluster, "read_tokened") - calls >= 10  # all but the first chunk or so: not kept
        for _ in range(2):  # read at random offsets: kept, the second round makes no DataNode read
            calls = datanode_calls(cluster, "read_tokened")
            got = _at_random(m.path / "big.bin", len(big), mib)
            assert all(v == big[k:k + mib] for k, v in got.items()) and len(got) == 6
        assert datanode_calls(cluster, "read_tokened") == calls
    finally:
        m.close()
    m = Mount(cluster, f"{bucket}/stream", tmp_path / "d", "--cache", "none", "--cache-mem", "64M",
              "--cache-disk", "64M", "--cache-dir", str(tmp_path / "cache"), *small_chunks, log=tmp_path / "m.log")
    try:
        assert _front_to_back(m.path / "big.bin") == big
        calls = datanode_calls(cluster, "read_tokened")
        assert _front_to_back(m.path / "big.bin") == big
        assert datanode_calls(cluster, "read_tokened") == calls  # the disk tier kept the stream
        assert sum(p.stat().st_size for p in (tmp_path / "cache" / "blocks").iterdir()) >= 10 * mib
    finally:
        m.close()


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("direct")).start()
    yield c
    c.close()


def _serving_node(cluster: Cluster, bucket: str, key: str, block: int) -> str:
    """The DataNode a direct read of block number `block` of the object goes to (pick_replica over the holders)."""
    async def locate():
        async with S3Client(cluster.endpoint, MAIN[0], MAIN[1]) as c:
            return await c.locate([(bucket, key, None, None)])
    r = asyncio.run(locate())
    p = r.items[0].pieces[block]
    port = int(pick_replica(p.id, p.nodes, r.addrs).rsplit(":", 1)[1])
    return next(n for n, p in cluster.ports.items() if n.startswith("dn") and p[1] == port)


def test_a_datanode_that_cannot_be_reached_is_read_around_on_the_other_replicas(own_cluster, tmp_path):
    s3 = own_cluster.s3()
    s3.create_bucket(Bucket="fallback")
    body = os.urandom(9 << 20)  # blocks of 4, 4 and 1 MiB
    s3.put_object(Bucket="fallback", Key="f.bin", Body=body)
    own_cluster.replicate_once()  # every block on all three nodes
    m = Mount(own_cluster, "fallback", tmp_path / "fb", "--cache", "off", "--timeout", "5",
              log=tmp_path / "mount.log")
    try:
        with open(m.path / "f.bin", "rb", buffering=0) as f:
            assert f.read(1 << 20) == body[:1 << 20]
            reads = fs_requests(own_cluster).get("read", 0)
            own_cluster.kill(_serving_node(own_cluster, "fallback", "f.bin", 1))
            t0 = time.monotonic()
            f.seek(4 << 20)
            assert f.read() == body[4 << 20:]  # from the blocks' other holders, still straight from the DataNodes
            assert time.monotonic() - t0 < 20
        assert fs_requests(own_cluster).get("read", 0) == reads  # not through the gateway
    finally:
        m.close()
