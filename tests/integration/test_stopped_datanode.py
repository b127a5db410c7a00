"""A DataNode that stops answering without closing its connections (SIGSTOP here; a hung disk or a long pause alike),
while the NameNode still counts it alive: reads that another holder can serve move on to it after a short deadline
(common/failover.py), through the gateway (whole GETs, ranges over two blocks, batch reads) and straight from the
DataNodes (fsspec). Before, each waited out the RPC timeout: a 48 MiB GET took 60 s, an fsspec read failed."""
from __future__ import annotations

import os
import signal
import time

import fsspec
import pytest

from cluster import MAIN, Cluster

pytestmark = pytest.mark.integration
BLOCK = 4 << 20


@pytest.fixture()
def stopped(tmp_path):
    """A cluster whose dn1 is stopped (SIGSTOP) after the objects were written and read once (pooled connections
    to it are open); the NameNode keeps it alive for the test's length."""
    c = Cluster(tmp_path, block_size=BLOCK, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "300"}).start()
    s3 = c.s3()
    s3.create_bucket(Bucket="bkt")
    big = os.urandom(6 * BLOCK + 1000)
    small = {f"s/{i:02d}": os.urandom(20_000 + i) for i in range(24)}
    s3.put_object(Bucket="bkt", Key="big", Body=big)
    for k, v in small.items():
        s3.put_object(Bucket="bkt", Key=k, Body=v)
    _wait_replicated(c, ["big", *small])
    assert s3.get_object(Bucket="bkt", Key="big")["Body"].read() == big  # connections to every node now pooled
    c.procs["dn1"].send_signal(signal.SIGSTOP)
    try:
        yield c, s3, big, small
    finally:
        c.procs["dn1"].send_signal(signal.SIGCONT)
        c.close()


def _wait_replicated(c, keys) -> None:
    ids = {b.id for k in keys for b in c.nn.stat("bkt", k).obj.blocks}
    deadline = time.monotonic() + 60
    while not all(ids <= held for held in c.datanode_blocks().values()):
        assert time.monotonic() < deadline, "replication"
        c.replicate_once()
        time.sleep(0.2)


def _timed(fn):
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


def test_gateway_reads_move_past_a_stopped_datanode(stopped):
    c, s3, big, small = stopped
    for _ in range(2):
        got, took = _timed(lambda: s3.get_object(Bucket="bkt", Key="big")["Body"].read())
        assert got == big and took < 15, took  # the RPC timeout is 30 s
        rng = f"bytes={BLOCK - 500}-{BLOCK + 499}"  # across two blocks: read_joined's one-node read first
        got, took = _timed(lambda: s3.get_object(Bucket="bkt", Key="big", Range=rng)["Body"].read())
        assert got == big[BLOCK - 500:BLOCK + 500] and took < 15, took
    fs = fsspec.filesystem("epochfs", endpoint_url=c.endpoint, key=MAIN[0], secret=MAIN[1],
                           direct_reads=False, skip_instance_cache=True)
    got, took = _timed(lambda: fs.cat([f"bkt/{k}" for k in small]))  # the gateway's batch read
    assert got == {f"bkt/{k}": v for k, v in small.items()} and took < 15, took
    log = (c.root / "logs" / "gw.log").read_text()
    assert "did not answer a read in time" in log, log[-3000:]


def test_direct_reads_move_past_a_stopped_datanode(stopped):
    c, _, big, small = stopped
    fs = fsspec.filesystem("epochfs", endpoint_url=c.endpoint, key=MAIN[0], secret=MAIN[1],
                           skip_instance_cache=True)
    for _ in range(2):
        got, took = _timed(lambda: fs.cat_file("bkt/big"))
        assert got == big and took < 15, took
        got, took = _timed(lambda: fs.cat([f"bkt/{k}" for k in small]))
        assert got == {f"bkt/{k}": v for k, v in small.items()} and took < 15, took
    with fs.open("bkt/big", "rb") as f:  # a file's ranged reads (a loader's)
        f.seek(3 * BLOCK - 10)
        got, took = _timed(lambda: f.read(BLOCK))
        assert got == big[3 * BLOCK - 10:4 * BLOCK - 10] and took < 15, took


def test_writes_move_past_a_stopped_datanode(stopped):
    """Blocks placed on the stopped node (the NameNode still counts it alive) go to their next node after the
    write deadline: through the gateway (one block, a batch of small ones) and straight to the DataNodes (fsspec),
    each object whole afterwards."""
    c, s3, _, _ = stopped
    fs = fsspec.filesystem("epochfs", endpoint_url=c.endpoint, key=MAIN[0], secret=MAIN[1], skip_instance_cache=True)
    written = {}
    for i in range(6):  # primaries rotate over the nodes: some of these are placed on dn1 first
        for key, body, put in ((f"w/s3-{i}", os.urandom(5 << 20), lambda k, b: s3.put_object(Bucket="bkt", Key=k,
                                                                                               Body=b)),
                               (f"w/fs-{i}", os.urandom(100_000), lambda k, b: fs.pipe_file(f"bkt/{k}", b)),
                               (f"w/fsbig-{i}", os.urandom(9 << 20), lambda k, b: fs.pipe_file(f"bkt/{k}", b))):
            _, took = _timed(lambda: put(key, body))
            assert took < 20, (key, took)  # the RPC timeouts are 30 and 60 s
            written[key] = body
    many = {f"w/many/{i:02d}": os.urandom(3000 + i) for i in range(40)}
    _, took = _timed(lambda: fs.pipe({f"bkt/{k}": v for k, v in many.items()}))  # batch ingest
    assert took < 20, took
    written.update(many)
    for k, body in written.items():
        assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == body, k
