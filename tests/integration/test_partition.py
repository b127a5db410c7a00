"""A network partition, for real: one DataNode runs in a network namespace of its own with its own address (the
others, the NameNode and the gateway listen on the bridge's address here), and taking its veth link down cuts it off
from everything while it keeps running. It is declared dead and its blocks are re-replicated; every object reads
back byte-identical; when the link comes back the node is alive again and the cluster converges (its replaced copies
are deleted, every block is stored exactly as many times as its factor, on the nodes the metadata names)."""
from __future__ import annotations

import os
import time

import pytest
from cluster import Cluster
from netns import hosts_or_skip
from test_recovery import settle_replication, wait_for

pytestmark = pytest.mark.integration

SUBNET = "10.231.78"  # test_deploy.py uses 10.231.77


@pytest.fixture
def hosts():
    with hosts_or_skip(SUBNET, {"dn4": 2}) as h:
        yield h


def test_partitioned_datanode_is_replaced_and_reconciled_when_the_partition_heals(hosts, tmp_path):
    here = (hosts.bridge_addr, [])
    c = Cluster(tmp_path, datanodes=4,
                nn_env={"NN_HEARTBEAT_TIMEOUT_S": "2", "NN_REPAIR_INTERVAL_S": "0.2"},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0", "DN_BLOCK_REPORT_INTERVAL_S": "0.5"},
                gw_env={"GW_RPC_TIMEOUT_S": "3"},  # a read stuck on the cut-off node fails over after 3 s
                hosts={"nn": here, "gw": here, "dn1": here, "dn2": here, "dn3": here,
                       "dn4": (hosts.addr("dn4"), hosts.exec_prefix("dn4"))})
    try:
        c.start()
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        bodies = {f"k{i:02d}": os.urandom(200_000 + i) for i in range(24)}
        for k, v in bodies.items():
            s3.put_object(Bucket="bkt", Key=k, Body=v)
        ids = c.node_ids()
        away, others = ids["dn4"], {ids[n]: n for n in ("dn1", "dn2", "dn3")}
        assert node(c, away).host == hosts.addr("dn4") and node(c, ids["dn1"]).host == hosts.bridge_addr
        settle_replication(c, blocks(c, bodies))
        on_away = [k for k in bodies if any(away in b.nodes for b in blocks(c, [k]))]
        assert on_away

        hosts.cut("dn4")
        t0 = time.monotonic()
        primary_away = next((k for k in on_away if blocks(c, [k])[0].nodes[0] == away), on_away[0])
        assert s3.get_object(Bucket="bkt", Key=primary_away)["Body"].read() == bodies[primary_away]  # failover
        wait_for(lambda: away in c.nn.stats().dead_nodes, 20, "dn4 to be declared dead")
        detected = time.monotonic() - t0
        assert node(c, away).state == "dead"
        wait_for(lambda: replicated_on(c, blocks(c, bodies), others), 30, "re-replication onto dn1-dn3")
        job = next(j for j in c.nn.jobs() if j.id == f"node-{away}")
        assert job.kind == "re-replication" and job.detail["done"] >= len(on_away)
        assert c.nn.stats().lost == 0
        during = {f"p{i}": os.urandom(50_000) for i in range(4)}  # writes go on without the cut-off node
        for k, v in during.items():
            s3.put_object(Bucket="bkt", Key=k, Body=v)
        bodies.update(during)  # (blocks a gateway had leased on dn4 before its death are re-replicated too)
        wait_for(lambda: replicated_on(c, blocks(c, bodies), others), 30, "the new objects on dn1-dn3")
        for k, v in bodies.items():
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == v, k

        hosts.heal("dn4")
        t1 = time.monotonic()
        wait_for(lambda: node(c, away).state == "alive", 30, "dn4 to be alive again")
        back = time.monotonic() - t1
        wait_for(lambda: converged(c, blocks(c, bodies)), 30, "convergence after the partition healed")
        assert c.nn.stats().under_replicated == 0
        for k, v in bodies.items():
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == v, k
        print(f"\npartition: dn4 seen dead {detected:.2f}s after its link went down (a failover read of up to 3 s "
              f"in between), alive again "
              f"{back:.2f}s after it came back")
    finally:
        c.close()


def blocks(c: Cluster, keys) -> list:
    return [b for k in keys for b in c.nn.stat("bkt", k).obj.blocks]


def node(c: Cluster, node_id: int):
    return next(n for n in c.nn.nodes() if n.id == node_id)


def replicated_on(c: Cluster, block_lists: list, nodes: dict[int, str]) -> bool:
    """Every block has 3 distinct holders among `nodes` (id -> name) in the metadata, and each stores it."""
    stored = {nid: set(c.datanode(name, lambda dn: dn.blocks())) for nid, name in nodes.items()}
    return all(len(set(b.nodes)) == 3 and all(n in stored and b.id in stored[n] for n in b.nodes) for b in block_lists)


def converged(c: Cluster, block_lists: list) -> bool:
    """Every block is stored on exactly its 3 holders, no more (surplus copies removed) and no fewer."""
    have = c.datanode_blocks()
    stored = {nid: have[name] for name, nid in c.node_ids().items()}
    return all(len(set(b.nodes)) == 3 and {n for n, on in stored.items() if b.id in on} == set(b.nodes)
               for b in block_lists)
