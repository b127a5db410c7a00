"""Replication benchmark: write throughput under the async, sync:2 and sync:3 write policies (ratios to async and
server CPU per MB, from /proc), the async loss window (ack -> first secondary copy, and objects lost to a kill -9
right after their acknowledgement), the restore of a dead DataNode's blocks (blocks/s and MB/s, for 110 KiB and
4 MiB objects), and restart times (a dead DataNode detected, NameNode and gateway back to serving after kill -9).

    python bench/replication_bench.py                      # everything
    python bench/replication_bench.py --quick              # small sizes, a few minutes
    python bench/replication_bench.py --only restore --baseline a5e2aff   # restore, before (a5e2aff) and after
    python bench/replication_bench.py --only restore --defaults           # ... with the shipped settings
    python bench/replication_bench.py --only restart       # detection and restart times

Runs real clusters (NameNode, DataNodes, gateway) on loopback through tests/integration/cluster.py: one for the
write policies and the loss window, a fresh one per restore (so that only the data it writes counts), one for the
restarts. `--baseline COMMIT` runs each restore first on the servers of COMMIT (its tree from `git archive`).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import botocore.exceptions

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
sys.path.insert(0, str(HERE))
from cluster import SECRET, Cluster, upload_until
from epochfs.common.rpc import RpcClient
from epochfs.common.clients import DataNodeClient, NameNodeClient
from s3_bench import CLK_TCK, proc_ticks

MiB = 1 << 20
POLICIES = ("async", "sync:2", "sync:3")
RESTORE_NN = {"NN_HEARTBEAT_TIMEOUT_S": "2", "NN_REPAIR_INTERVAL_S": "0.2", "NN_REPAIR_BYTES_PER_S": "0",
              "NN_REPAIR_MAX_INFLIGHT": "32"}


def create_bucket(s3, name: str, policy: str) -> None:
    def add(request, **_):
        request.headers["x-epochfs-write-policy"] = policy
    s3.meta.events.register("before-sign.s3.CreateBucket", add)
    try:
        s3.create_bucket(Bucket=name)
    finally:
        s3.meta.events.unregister("before-sign.s3.CreateBucket", add)


def server_ticks(c: Cluster) -> int:
    return sum(proc_ticks(p.pid) or 0 for p in c.procs.values())


def drain_replication(c: Cluster, timeout: float = 120.0) -> None:
    """Wait until no DataNode has replication jobs queued."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(n.replication_lag.queued == 0 for n in c.nn.nodes() if n.alive):
            return
        time.sleep(0.2)


def throughput(c: Cluster, s3, size: int, count: int, threads: int) -> dict[str, dict]:
    out = {}
    for policy in POLICIES:
        bucket = "tp-" + policy.replace(":", "")
        create_bucket(s3, bucket, policy)
        bodies = {f"o{i}": os.urandom(size) for i in range(count)}
        time.sleep(1.0)  # let the servers go quiet
        t0, cpu0 = time.perf_counter(), server_ticks(c)
        acked = upload_until(s3, bucket, bodies, threading.Event(), threads)
        wall = time.perf_counter() - t0
        drain_replication(c)  # async: the background pushes' CPU counts too
        cpu = (server_ticks(c) - cpu0) / CLK_TCK
        mb = len(acked) * size / 1e6
        out[policy] = {"MB/s": mb / wall, "cpu_ms_per_MB": 1000 * cpu / mb, "acked": len(acked)}
    return out


async def _secondary_lag(c: Cluster, bucket: str, probes: int) -> list[float]:
    """Seconds from a PUT's acknowledgement until its first secondary stores the block."""
    s3 = c.s3()
    clients = {name: RpcClient("127.0.0.1", c.ports[name][1], SECRET) for name in c.procs if name.startswith("dn")}
    nn = clients["nn"] = RpcClient("127.0.0.1", c.ports["nn"][1], SECRET)
    ids = {nid: name for name, nid in c.node_ids().items()}
    lags = []
    try:
        for i in range(probes):
            await asyncio.to_thread(s3.put_object, Bucket=bucket, Key=f"p{i}", Body=os.urandom(64 << 10))
            t_ack = time.perf_counter()  # (the stat call below makes the measured lag an upper bound)
            blk = (await NameNodeClient(nn).stat(bucket, f"p{i}")).obj.blocks[0]
            second = clients[ids[blk.nodes[1]]]
            while not (await DataNodeClient(second).has([blk.id]))[0]:
                await asyncio.sleep(0.0005)
            lags.append(time.perf_counter() - t_ack)
    finally:
        for cl in clients.values():
            await cl.close()
    return lags


def kill_after_acks(c: Cluster, s3, bucket: str, n: int, victim: str) -> tuple[int, int]:
    """Upload small objects from 12 threads, kill -9 `victim` once n/2 are acknowledged, and count the
    acknowledged objects that cannot be read while it is down. Restarts it afterwards."""
    bodies = {f"k{i}": os.urandom(4000) for i in range(n)}
    acked: dict[str, bytes] = {}
    up = threading.Thread(target=upload_until, args=(s3, bucket, bodies, threading.Event(), 12, acked))
    up.start()
    while len(acked) < n // 2:
        time.sleep(0.001)
    c.kill(victim)
    up.join()
    lost = 0
    for k, v in acked.items():
        try:
            ok = s3.get_object(Bucket=bucket, Key=k)["Body"].read() == v
        except botocore.exceptions.ClientError:
            ok = False
        lost += not ok
    c.start_datanode(int(victim[2:]))
    c.replicate_once()
    return lost, len(acked)


# --defaults: the shipped settings (heartbeats every 1 s, NN_HEARTBEAT_TIMEOUT_S=10, NN_REPAIR_MAX_INFLIGHT=16,
# NN_REPAIR_BYTES_PER_S=64 MiB/s, ...); otherwise a quick failure detector and no rate limit
DEFAULTS = ({}, {"DN_HEARTBEAT_INTERVAL_S": "1"})


def restore(root: Path, size: int, count: int, defaults: bool = False) -> dict:
    """On a fresh cluster of its own (so that only this data counts): write `count` objects of `size` bytes (one
    block each up to 4 MiB), wait until every copy is in place, kill -9 one DataNode, and time until it is declared
    dead and until each of its blocks has a new confirmed replica (its re-replication job is done); then check every
    block is back at 3 live replicas and nothing is lost. Also samples the NameNode's `under_replicated` figure while
    the blocks are copied back (a live figure reads above 0 throughout)."""
    nn_env, dn_env = DEFAULTS if defaults else (RESTORE_NN, {})
    c = Cluster(root, datanodes=4, nn_env=nn_env, dn_env={"DN_SCRUB_BYTES_PER_S": "0", **dn_env}).start()
    try:
        s3 = c.s3(max_pool_connections=8)
        s3.create_bucket(Bucket="restore")
        body = os.urandom(size)
        t0 = time.perf_counter()
        keys = list(upload_until(s3, "restore", {f"r{i}": body for i in range(count)}, threading.Event(), 8))
        write_s = time.perf_counter() - t0
        drain_replication(c, timeout=600)
        victim = "dn4"
        dead = c.node_ids()[victim]
        blocks = [b for k in keys for b in c.nn.stat("restore", k).obj.blocks]
        moved = [b for b in blocks if dead in b.nodes]
        t0 = time.perf_counter()
        c.kill(victim)
        while next(x for x in c.nn.nodes() if x.id == dead).alive:
            time.sleep(0.02)
        detect = time.perf_counter() - t0
        under: list[tuple[float, int]] = []  # (s after the kill, under_replicated)
        while True:
            job = next((j for j in c.nn.jobs() if j.node == dead), None)
            if job is not None and job.state == "done":
                break
            under.append((time.perf_counter() - t0, c.nn.stats().under_replicated))
            time.sleep(0.1)
        restored = time.perf_counter() - t0
        live = set(c.node_ids().values())
        after = [b for k in keys for b in c.nn.stat("restore", k).obj.blocks]
        assert all(len(set(b.nodes)) == 3 and set(b.nodes) <= live for b in after), "not back at 3 live replicas"
        assert c.nn.stats().lost == 0
        moved_bytes = sum(b.size for b in moved)
        repair_s = restored - detect
        return {"objects": len(keys), "MiB": len(keys) * size / MiB, "write_s": write_s, "detect_s": detect,
                "restore_s": restored, "blocks_moved": len(moved), "MiB_moved": moved_bytes / MiB,
                "blocks_per_s": len(moved) / repair_s, "MB_per_s": moved_bytes / 1e6 / repair_s,
                "under_max": max((u for _, u in under), default=0),
                "under_first_s": next((t for t, u in under if u), None)}
    finally:
        c.close()


@contextlib.contextmanager
def servers_from(commit: str | None):
    """Run the cluster's processes from the source tree of `commit` (git archive into a temporary directory, put
    first on PYTHONPATH), or from this checkout when None: the before/after comparison in one run."""
    if commit is None:
        yield "this checkout"
        return
    repo = HERE.parent
    with tempfile.TemporaryDirectory(prefix="epochfs-baseline-") as tmp:
        tree = Path(tmp) / "epochfs"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(repo), "archive", commit], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = tmp + (os.pathsep + old if old else "")
        try:
            yield f"commit {commit}"
        finally:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old


RESTORE_SIZES = {"110KiB": 110 << 10, "4MiB": 4 * MiB}


def print_restore(label: str, code: str, r: dict) -> None:
    print(f"  {label:6s} {code:18s} {r['objects']} objects ({r['MiB']:.0f} MiB, written in {r['write_s']:.1f}s); "
          f"declared dead {r['detect_s']:.2f}s after kill -9; its {r['blocks_moved']} blocks "
          f"({r['MiB_moved']:.0f} MiB) back at 3 replicas {r['restore_s']:.2f}s after the kill: "
          f"{r['blocks_per_s']:.1f} blocks/s, {r['MB_per_s']:.1f} MB/s from detection on; under_replicated (read every "
          f"0.1 s) first above 0 " + (f"{r['under_first_s']:.2f}s after the kill" if r["under_first_s"] else "never")
          + f", at most {r['under_max']}", flush=True)


def policies_and_window(root: Path, quick: bool) -> None:
    c = Cluster(root, datanodes=4, nn_env=RESTORE_NN, dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3(max_pool_connections=32)
        count = 48 if quick else 160
        for size, label in ((MiB, "1 MiB"), (128 << 10, "128 KiB")):
            res = throughput(c, s3, size, count if size == MiB else count * 4, 16)
            base = res["async"]["MB/s"]
            print(f"\nwrite throughput, {label} objects, 16 clients, 4 DataNodes, 3 replicas:")
            for p, r in res.items():
                print(f"  {p:7s} {r['MB/s']:7.1f} MB/s  ({r['MB/s'] / base:4.2f}x async)  "
                      f"server CPU {r['cpu_ms_per_MB']:6.1f} ms/MB")

        create_bucket(s3, "window", "async")
        lags = sorted(asyncio.run(_secondary_lag(c, "window", 50 if quick else 200)))
        print(f"\nasync loss window (ack -> first secondary has the block, {len(lags)} sequential PUTs): "
              f"median {statistics.median(lags) * 1000:.1f} ms, p99 {lags[int(len(lags) * .99) - 1] * 1000:.1f} ms,"
              f" max {lags[-1] * 1000:.1f} ms")
        create_bucket(s3, "killa", "async")
        create_bucket(s3, "kills", "sync:2")
        n = 300 if quick else 1000
        for bucket, policy in (("killa", "async"), ("kills", "sync:2")):
            lost, acked = kill_after_acks(c, s3, bucket, n, "dn1")
            print(f"kill -9 of a DataNode mid-stream, {policy}: {lost} of {acked} acknowledged objects unreadable "
                  "while it is down (all readable once it returns)")
    finally:
        c.close()


def serving_again(s3, bucket: str, key: str, body: bytes, t0: float, timeout: float = 120.0) -> float:
    """Seconds from t0 until a GET of `key` through the gateway returns `body`."""
    while time.perf_counter() - t0 < timeout:
        try:
            if s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body:
                return time.perf_counter() - t0
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError):
            pass
        time.sleep(0.02)
    raise TimeoutError(f"{key} not served {timeout}s after the restart")


def restarts(root: Path, objects: int) -> dict:
    """With the default heartbeat settings (DataNodes every 1 s, NN_HEARTBEAT_TIMEOUT_S=10): time from kill -9 of a
    DataNode to the NameNode marking it dead; and, with `objects` objects stored, from kill -9 of the NameNode (then
    of the gateway) to a GET through the gateway succeeding again, the process started at once."""
    c = Cluster(root, datanodes=3, dn_env={"DN_SCRUB_BYTES_PER_S": "0", "DN_HEARTBEAT_INTERVAL_S": "1"}).start()
    try:
        s3 = c.s3(max_pool_connections=16)
        s3.create_bucket(Bucket="restart")
        bodies = {f"o/{i:06d}": os.urandom(4096) for i in range(objects)}
        acked = upload_until(s3, "restart", bodies, threading.Event(), 16)
        key = next(iter(acked))
        out = {"objects": len(acked)}
        dead = c.node_ids()["dn3"]
        time.sleep(1.5)
        t0 = time.perf_counter()
        c.kill("dn3")
        while next(x for x in c.nn.nodes() if x.id == dead).alive:
            time.sleep(0.02)
        out["detect_s"] = time.perf_counter() - t0
        for name, start in (("nn", c.start_namenode), ("gw", c.start_gateway)):
            t0 = time.perf_counter()
            c.kill(name)
            start()
            out[f"{name}_up_s"] = time.perf_counter() - t0  # /healthz answers
            out[f"{name}_serving_s"] = serving_again(s3, "restart", key, acked[key], t0)
        return out
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes")
    ap.add_argument("--only", choices=("policies", "restore", "restart"), help="run one part (default: all)")
    ap.add_argument("--sizes", default="110KiB,4MiB", help=f"restore: object sizes, of {', '.join(RESTORE_SIZES)}")
    ap.add_argument("--restore-mib", type=int, default=None,
                    help="restore: data written per size before the kill (default 256 MiB of 110 KiB objects, "
                         "1024 MiB of 4 MiB ones; --quick: 32 / 128)")
    ap.add_argument("--baseline", metavar="COMMIT", help="restore: also run it on the servers of COMMIT, first")
    ap.add_argument("--defaults", action="store_true", help="restore: with the default heartbeat and repair settings")
    ap.add_argument("--restart-objects", type=int, default=5000, help="restart: objects stored (4 KiB each)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="epochfs-repl-bench-") as tmp:
        if a.only in (None, "policies"):
            policies_and_window(Path(tmp) / "policies", a.quick)
        if a.only in (None, "restore"):
            print("\ndead DataNode restored (fresh cluster per run, 4 DataNodes, " + (
                "the default settings: heartbeats every 1 s, NN_HEARTBEAT_TIMEOUT_S=10, NN_REPAIR_MAX_INFLIGHT=16, "
                "NN_REPAIR_BYTES_PER_S=64 MiB/s):" if a.defaults else "heartbeats every 0.3 s, "
                + " ".join(f"{k}={v}" for k, v in RESTORE_NN.items()) + "):"))
            for label in a.sizes.split(","):
                size = RESTORE_SIZES[label]
                mib = a.restore_mib or {True: 32, False: 256}[a.quick] * (4 if size >= MiB else 1)
                count = max(1, mib * MiB // size)
                for commit in ([a.baseline] if a.baseline else []) + [None]:
                    with servers_from(commit) as code:
                        r = restore(Path(tmp) / f"restore-{label}-{commit or 'new'}", size, count, a.defaults)
                    print_restore(label, code, r)
        if a.only in (None, "restart"):
            r = restarts(Path(tmp) / "restart", 500 if a.quick else a.restart_objects)
            print(f"\nrestarts ({r['objects']} objects stored, 3 DataNodes): a kill -9'd DataNode declared dead after "
                  f"{r['detect_s']:.2f}s (heartbeats every 1 s, NN_HEARTBEAT_TIMEOUT_S=10); NameNode kill -9 -> "
                  f"/healthz {r['nn_up_s']:.2f}s, S3 GET served {r['nn_serving_s']:.2f}s; gateway kill -9 -> /healthz "
                  f"{r['gw_up_s']:.2f}s, S3 GET served {r['gw_serving_s']:.2f}s")


if __name__ == "__main__":
    main()
