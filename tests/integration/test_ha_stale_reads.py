"""Stale reads from standby NameNodes (issue 16's stretch, HDFS's observer reads): a dataset-mode mount, manifests and
batch stats are answered by standbys while they can vouch for being within NN_STALE_READ_MAX_S of the metadata log's
end, with the same answers as the active NameNode; a standby cut off from etcd stops serving them within that bound
and clients get their answers from the active one; msync gives read-your-writes; S3's own reads never go to a
standby. Real etcd (three members), three real NameNode processes, DataNodes, the gateway and a FUSE mount."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cluster import MAIN, SECRET, wait_until  # noqa: E402
from ha import Etcd, HaCluster, HaNameNodes, wait_stopped  # noqa: E402
from mounting import Mount, needs_fuse  # noqa: E402

from epochfs.common import errors  # noqa: E402
from epochfs.common import messages as m  # noqa: E402
from epochfs.common.client import S3Client  # noqa: E402
from epochfs.common.clients import NameNodeClient  # noqa: E402
from epochfs.common.rpc import RpcClient  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("etcd") is None, reason="no etcd binary")]

BOUND_S = 0.5  # NN_STALE_READ_MAX_S of these NameNodes
OBJ = m.ObjectRecord(size=0, etag='"d41d8cd98f00b204e9800998ecf8427e"', owner="alice")


@pytest.fixture(scope="module")
def ha(tmp_path_factory):
    """etcd (3 members); nn1 (active: started first) and nn2 given every member, nn3 only member 2 (so that
    stopping that member stalls nn3's tailing while the cluster goes on); DataNodes and a gateway."""
    root = tmp_path_factory.mktemp("ha-stale")
    etcd = Etcd(root, n=3).start()
    nns = HaNameNodes(root, etcd, env={"NN_STALE_READ_MAX_S": str(BOUND_S)},
                      env_for={3: {"NN_ETCD_ENDPOINTS": etcd.endpoint(2)}})
    c = None
    try:
        nns.start_led_by_first()
        c = HaCluster(root, nns).start()
        yield nns, c
    finally:
        if c is not None:
            c.close()
        nns.close()
        etcd.close()


def client(nns: HaNameNodes, *which: int, retry_s: float = 10.0) -> NameNodeClient:
    """A NameNodeClient of the NameNodes `which` (one: pinned to it)."""
    pools = [RpcClient("127.0.0.1", nns.ports[i][1], SECRET, timeout=10.0) for i in which]
    return NameNodeClient(pools, retry_s=retry_s, follow=len(pools) > 1)


def run(nns: HaNameNodes, which: tuple[int, ...], fn, retry_s: float = 10.0):
    """fn(client of the NameNodes `which`) run to completion; `retry_s` 0: a refusal is raised at once."""
    async def go():
        c = client(nns, *which, retry_s=retry_s)
        try:
            return await fn(c)
        finally:
            await c.close()
    return asyncio.run(go())


def stale_counts(nns: HaNameNodes) -> dict[int, tuple[int, int]]:
    """NameNode -> (stale reads it served, refused), as it reports them."""
    out = {}
    for i in nns.procs:
        st = nns.status(i)
        out[i] = (st.stale_served, st.stale_refused)
    return out


def nn_metric(nns: HaNameNodes, i: int, series: str) -> float:
    for line in httpx.get(f"http://127.0.0.1:{nns.ports[i][0]}/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def manifest_keys(c: NameNodeClient, bucket: str, stale: bool) -> list[tuple]:
    out, after = [], ""
    while True:
        page = await c.manifest(bucket, after=after, limit=100, stale=m.StaleOk() if stale else None)
        out += [(it.key, it.size, it.etag) for it in page.items]
        if not page.truncated:
            return out
        after = out[-1][0]


@needs_fuse
def test_a_dataset_mount_and_manifests_are_answered_by_standbys_as_the_active_would(ha, tmp_path):
    nns, c = ha
    s3 = c.s3()
    s3.create_bucket(Bucket="dset")
    files = {f"d{i % 4}/s{i:03d}.bin": os.urandom(100 + 37 * i) for i in range(40)}
    for k, v in files.items():
        s3.put_object(Bucket="dset", Key=k, Body=v)
    nns.caught_up()
    a = nns.active()
    standbys = [i for i in nns.procs if i != a]
    before = stale_counts(nns)

    def epoch(name: str) -> None:
        mnt = Mount(c, "dset", tmp_path / name, "--dataset", log=tmp_path / "mount.log")
        try:
            listed = {str(p.relative_to(mnt.path)): p.stat().st_size for p in mnt.path.rglob("*") if p.is_file()}
            assert listed == {k: len(v) for k, v in files.items()}
            for k in sorted(files):
                assert (mnt.path / k).read_bytes() == files[k]
        finally:
            mnt.close()
    epoch("mnt")
    after = stale_counts(nns)
    print("mount: stale reads served / refused per NameNode",
          {i: (after[i][0] - before[i][0], after[i][1] - before[i][1]) for i in nns.procs}, "active", a)
    # the listings and stats of the four directories' files came from standbys; the active served no stale read
    # (it answers them as any read: the count is of reads served as a standby)
    assert sum(after[i][0] - before[i][0] for i in standbys) >= 4, (before, after)
    assert after[a] == before[a]
    # the first listing of each directory through a mount stamped it with its bucket: a write, which only the active
    # NameNode does (the standbys answered NotLeader: needs_active); a second mount needs no write
    needs = {i: nn_metric(nns, i, 'epochfs_nn_stale_reads_total{result="needs_active"}') for i in standbys}
    assert sum(needs.values()) >= 1
    served = {i: nns.status(i).stale_served for i in standbys}
    epoch("mnt2")
    assert {i: nn_metric(nns, i, 'epochfs_nn_stale_reads_total{result="needs_active"}') for i in standbys} == needs
    print("second mount: stale reads served per standby", {i: nns.status(i).stale_served - served[i]
                                                           for i in standbys})
    assert sum(nns.status(i).stale_served - served[i] for i in standbys) >= 5
    after = stale_counts(nns)

    # the manifest as loaders read it through the gateway (?stale=1): equal to the active's answer
    async def gateway_manifest(stale: bool):
        async with S3Client(c.endpoint, MAIN[0], MAIN[1], stale_reads=stale) as cl:
            return [tuple(e) for page in [p async for p in cl.manifest("dset")] for e in page]
    before = stale_counts(nns)
    assert asyncio.run(gateway_manifest(True)) == asyncio.run(gateway_manifest(False))
    after = stale_counts(nns)
    assert sum(after[i][0] - before[i][0] for i in standbys) == 1  # one page, from one standby

    # and straight from the NameNodes: each standby's stale answer equals the active's strong one
    strong = run(nns, (a,), lambda cl: manifest_keys(cl, "dset", False))
    for i in standbys:
        assert run(nns, (i,), lambda cl: manifest_keys(cl, "dset", True)) == strong
    # a standby still refuses the same read without the stale flag
    with pytest.raises(errors.NotLeader):
        run(nns, (standbys[0],), lambda cl: manifest_keys(cl, "dset", False), retry_s=0)
    # its Prometheus counter shows what it served
    assert nn_metric(nns, standbys[0], 'epochfs_nn_stale_reads_total{result="served"}') >= 1
    # and so does the admin API's HA view
    h = httpx.get(f"{c.endpoint}/admin/v1/ha", auth=(MAIN[0], MAIN[1])).json()
    by_addr = {n["address"]: n for n in h["namenodes"]}
    assert by_addr[nns.addr(standbys[0])]["stale_served"] == nns.status(standbys[0]).stale_served


def test_c_msync_gives_read_your_writes_on_standbys(ha):
    nns, _ = ha
    a = nns.active()

    async def go(cl: NameNodeClient):
        await cl.bucket_create("ryw", owner="alice")
        for j in range(100):
            await cl.put_object("ryw", f"k{j:03d}", OBJ)
            seq = await cl.msync()
            res = await cl.stat_many([("ryw", f"k{j:03d}")], stale=m.StaleOk())
            assert not res.objs[0].error, (j, seq, res.objs[0])
        return cl.stale_reads, cl.stale_fallbacks
    served, fallbacks = run(nns, tuple(sorted(nns.procs)), go)
    print("read-your-writes: 100 stale stat_many after msync, by standbys / by the active:", served, fallbacks)
    assert served + fallbacks == 100 and served > 0, (served, fallbacks)

    # a standby answers no read asking for a log position it has not applied: it waits a moment, then TooStale
    standby = next(i for i in nns.procs if i != a)
    end = run(nns, (a,), lambda cl: cl.msync())

    async def ahead(cl: NameNodeClient):
        return await cl._call(m.StatMany(items=[("ryw", "k000")], stale=m.StaleOk(min_seq=end + 1000)))
    t0 = time.monotonic()
    with pytest.raises(errors.TooStale):
        run(nns, (standby,), ahead, retry_s=0)
    assert time.monotonic() - t0 < 2.0


def test_d_s3_reads_never_go_to_a_standby(ha):
    nns, c = ha
    s3 = c.s3()
    s3.create_bucket(Bucket="strong")
    before = stale_counts(nns)
    for j in range(20):
        s3.put_object(Bucket="strong", Key=f"k{j}", Body=b"x" * j)
        assert s3.head_object(Bucket="strong", Key=f"k{j}")["ContentLength"] == j  # read-after-write
        assert s3.get_object(Bucket="strong", Key=f"k{j}")["Body"].read() == b"x" * j
        assert len(s3.list_objects_v2(Bucket="strong")["Contents"]) == j + 1
    assert stale_counts(nns) == before  # no standby served (nor refused) any of them


def test_b_a_standby_cut_off_from_etcd_stops_serving_within_the_bound(ha):
    nns, c = ha
    a = nns.active()
    assert a != 3  # nn3 talks to etcd member 2 only
    acked: list[tuple[float, str]] = []

    def write(prefix: str, n: int) -> None:
        async def go(cl):
            for j in range(n):
                await cl.put_object("cut", f"{prefix}{j:03d}", OBJ)
                acked.append((time.monotonic(), f"{prefix}{j:03d}"))
        run(nns, (a,), go)

    run(nns, (a,), lambda cl: cl.bucket_create("cut", owner="alice"))
    write("a", 20)
    nns.caught_up()
    assert len(run(nns, (3,), lambda cl: manifest_keys(cl, "cut", True))) == 20

    nns.etcd.step_down(2)  # (the active one's lease refreshes must not wait for a raft election: not what this tests)
    etcd = nns.etcd.procs[2]
    etcd.send_signal(signal.SIGSTOP)  # nn3's tailing (and every etcd call it makes) stalls; nn3 itself runs on
    wait_stopped(etcd.pid)
    stopped = time.monotonic()
    try:
        write("b", 20)  # etcd's other two members go on (after electing a raft leader, if member 2 was it)
        answers = {"served": 0, "refused": 0}
        deadline = max(stopped + BOUND_S + 2.0, time.monotonic() + 1.0)
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                keys = {k for k, _, _ in run(nns, (3,), lambda cl: manifest_keys(cl, "cut", True), retry_s=0)}
            except errors.TooStale:
                answers["refused"] += 1
                continue
            answers["served"] += 1
            # bounded staleness: every write acknowledged more than the bound before the read is in its answer
            assert {k for t, k in acked if t < sent - BOUND_S} <= keys
            assert sent < stopped + BOUND_S + 0.05, "served a stale read past the bound while cut off"
        assert answers["refused"] >= 1, answers

        # clients still get right answers: nn3 refuses, nn2 serves; nn2 frozen too, the active answers them
        write("c", 5)
        time.sleep(BOUND_S)
        want = run(nns, (a,), lambda cl: manifest_keys(cl, "cut", False))
        assert len(want) == 45

        async def stale_manifests(cl):
            got = [await manifest_keys(cl, "cut", True) for _ in range(6)]
            return got, cl.stale_reads, cl.stale_fallbacks
        got, served, fallbacks = run(nns, (1, 2, 3), stale_manifests)
        assert all(g == want for g in got) and served >= 1
        other = next(i for i in nns.procs if i not in (a, 3))
        nns.signal(other, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            got, served, fallbacks = run(nns, (1, 2, 3), stale_manifests)
            assert all(g == want for g in got) and fallbacks >= 1
            assert time.monotonic() - t0 < 10  # one short timeout for the frozen standby, not one per read
        finally:
            nns.signal(other, signal.SIGCONT)
    finally:
        etcd.send_signal(signal.SIGCONT)
    # back in touch with etcd, nn3 catches up and serves stale reads again
    resumed = time.monotonic()
    wait_until(lambda: _serves(nns, 3, len(want)), 30, "nn3 serving stale reads again")
    print(f"nn3 serves stale reads {time.monotonic() - resumed:.2f} s after its etcd member resumed")


def _serves(nns: HaNameNodes, i: int, n: int) -> bool:
    try:
        return len(run(nns, (i,), lambda cl: manifest_keys(cl, "cut", True), retry_s=0)) == n
    except errors.DomainError:
        return False


def test_e_a_client_with_stale_reads_sees_its_own_writes_and_those_before_it(ha):
    """An S3Client (fsspec's, with stale_reads) reads manifests and batches from standbys, yet sees its own writes
    and every write made before its first read: that read, and the first after each of its writes, asks the gateway
    for the active NameNode's log position (msync) and sends it along, so no standby answers without them -- not
    even nn3 with its etcd member frozen, which can vouch for being within the bound for a moment only (the active
    NameNode's pushes still bring it the log: within the bound it answers once it applied the write, or waits and
    refuses; past the bound it refuses, and another NameNode answers). Without the msync nn3 answers without."""
    nns, c = ha
    s3 = c.s3()
    assert nns.active() != 3  # nn3 talks to etcd member 2 only
    etcd = nns.etcd.procs[2]

    async def go():
        async with S3Client(c.endpoint, MAIN[0], MAIN[1], stale_reads=True) as cl:
            await cl.create_bucket("own")
            seen = []
            for j in range(8):
                await asyncio.to_thread(nns.caught_up)
                # a stale read of nn3's own: it confirms its freshness with etcd now, and vouches for it a while
                await asyncio.to_thread(run, nns, (3,), lambda nn: manifest_keys(nn, "own", True))
                etcd.send_signal(signal.SIGSTOP)
                try:
                    await asyncio.to_thread(wait_stopped, etcd.pid)
                    if j % 2:  # past the bound: nn3 can no longer vouch for its freshness and must refuse
                        await asyncio.sleep(BOUND_S + 0.1)
                    await cl.put("own", f"k{j}", b"v%d" % j)
                    keys = {e[0] for page in [p async for p in cl.manifest("own")] for e in page}
                    assert f"k{j}" in keys, (j, sorted(keys))
                    assert await cl.batch_get([("own", f"k{j}", None, None)]) == [b"v%d" % j]
                    seen.append(cl.stale_pos)
                    await asyncio.to_thread(s3.put_object, Bucket="own", Key=f"o{j}", Body=b"o")  # another's
                    async with S3Client(c.endpoint, MAIN[0], MAIN[1], stale_reads=True) as starting:
                        keys = {e[0] for page in [p async for p in starting.manifest("own")] for e in page}
                    assert f"o{j}" in keys, (j, sorted(keys))
                finally:
                    etcd.send_signal(signal.SIGCONT)
            return seen
    before = stale_counts(nns)
    positions = asyncio.run(go())
    after = stale_counts(nns)
    assert positions == sorted(positions) and positions[0] > 0  # an msync after each write
    print("own writes: stale reads served / refused per NameNode",
          {i: (after[i][0] - before[i][0], after[i][1] - before[i][1]) for i in nns.procs})
    # every read that reached nn3 past the bound was refused (the round robin sends it one of each iteration's reads)
    assert after[3][1] > before[3][1]
