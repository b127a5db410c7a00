"""Cluster summary, DataNodes and jobs (scrub, rebalance, decommission, garbage collection)."""
from __future__ import annotations

import itertools
import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path

from epochfs.common.messages import JobInfo, NodeInfo
from epochfs.common.space import pooled

from .. import metrics
from .auth import AdminDep
from .common import BAD_BODY, CtxDep
from .models import Job, JobCreate, Node, NodeId, Summary, Throughput

router = APIRouter(tags=["cluster"])
NodeIdPath = Annotated[NodeId, Path()]
_job_ids = itertools.count(1)


def node_view(n: NodeInfo) -> Node:
    state = n.state or ("alive" if n.alive else "dead")
    lag = n.replication_lag
    return Node(id=n.id, address=f"{n.host}:{n.rpc_port}", http_port=n.http_port,
                capacity=n.capacity, used=n.used, free=max(n.capacity - n.used, 0), blocks=n.blocks,
                last_heartbeat_s=n.heartbeat_age_s, state=state, write_error=n.write_error or None,
                replication_lag=float(lag.queued), replication_lag_s=float(lag.oldest_s),
                replication_refused=lag.no_space)


async def nodes_of(ctx) -> list[Node]:
    return [node_view(n) for n in await ctx.cluster.namenode.nodes()]


@router.get("/summary", response_model=Summary)
async def summary(_: AdminDep, ctx: CtxDep) -> Summary:
    infos = await ctx.cluster.namenode.nodes()
    nodes = [node_view(n) for n in infos]
    stats = await ctx.cluster.namenode.stats()
    usage = await ctx.cluster.namenode.bucket_usage()
    states: dict[str, int] = {}
    for n in nodes:
        states[n.state] = states.get(n.state, 0) + 1
    serving = [n.state in ("alive", "decommissioning", "read-only") for n in nodes]
    live = [n for n, ok in zip(nodes, serving) if ok]
    under, lost = stats.under_replicated, stats.lost
    waiting = {k: v for k, v in stats.waiting.items() if v}
    refused = sum(n.replication_refused for n in live)
    if refused:
        waiting["no_space"] = waiting.get("no_space", 0) + refused
    health = "down" if not live else "degraded" if (len(live) < len(nodes) - states.get("decommissioned", 0)
                                                    or under or lost or waiting or states.get("read-only")) else "ok"
    capacity, used = pooled([i for i, ok in zip(infos, serving) if ok])  # (a disk several share: once)
    return Summary(health=health, capacity=capacity, used=used, free=max(capacity - used, 0), buckets=len(usage),
                   objects=sum(u.objects for u in usage.values()), bytes=sum(u.bytes for u in usage.values()), nodes=states,
                   under_replicated=under, lost=lost, repairs_in_flight=stats.repairs_in_flight,
                   waiting_for_copies=sum(waiting.values()), waiting_reasons=waiting,
                   replication_queued=int(sum(n.replication_lag or 0 for n in live)),
                   gateway=Throughput(**metrics.totals()))


@router.get("/nodes", response_model=list[Node])
async def list_nodes(_: AdminDep, ctx: CtxDep) -> list[Node]:
    return sorted(await nodes_of(ctx), key=lambda n: n.id)


@router.get("/nodes/{node_id}", response_model=Node, responses={404: {"description": "no such DataNode"}})
async def get_node(node_id: NodeIdPath, _: AdminDep, ctx: CtxDep) -> Node:
    for n in await nodes_of(ctx):
        if n.id == node_id:
            return n
    raise HTTPException(404, f"no DataNode {node_id}")


async def _decommission(ctx, node_id: int) -> Job:
    if not any(n.id == node_id for n in await nodes_of(ctx)):
        raise HTTPException(404, f"no DataNode {node_id}")
    return job_view(await ctx.cluster.namenode.decommission(node_id))


@router.post("/nodes/{node_id}/decommission", response_model=Job, status_code=202,
             responses={404: {"description": "no such DataNode"}})
async def decommission(node_id: NodeIdPath, _: AdminDep, ctx: CtxDep) -> Job:
    """Drain a DataNode: it gets no new blocks, its blocks are copied elsewhere, then it is decommissioned."""
    return await _decommission(ctx, node_id)


def job_view(j: JobInfo) -> Job:
    return Job(id=j.id, kind=j.kind, state=j.state, progress=j.progress, node=j.node, detail=j.detail)


class GatewayJobs:
    """Jobs this gateway ran itself (garbage collection passes); the NameNode's jobs come from its `jobs` RPC."""

    def __init__(self, keep: int = 50) -> None:
        self.done: list[Job] = []
        self.keep = keep

    def add(self, job: Job) -> Job:
        self.done = (self.done + [job])[-self.keep:]
        return job


_gw_jobs = GatewayJobs()


@router.get("/jobs", response_model=list[Job])
async def list_jobs(_: AdminDep, ctx: CtxDep) -> list[Job]:
    nn_jobs = [job_view(j) for j in await ctx.cluster.namenode.jobs()]
    return nn_jobs + list(_gw_jobs.done)


@router.post("/jobs", response_model=Job, status_code=202,
             responses={**BAD_BODY, 404: {"description": "no such DataNode"},
                        409: {"description": "the DataNode is not alive"}})
async def start_job(req: JobCreate, _: AdminDep, ctx: CtxDep) -> Job:
    """Start a job: gc (one pass, done at once), decommission (of `node`), scrub (a full CRC pass on every live
    DataNode, or on `node`), rebalance (move replicas from the fullest to the emptiest nodes). Starting a scrub or
    rebalance while one runs returns the running one."""
    if req.kind == "gc":
        t = time.time()
        res = await ctx.cluster.namenode.gc_once()
        stats = await ctx.cluster.namenode.stats()
        return _gw_jobs.add(Job(id=f"gc-{next(_job_ids)}", kind="gc", state="done", progress=1.0,
                                detail={"expired_allocations": res.expired, "garbage_blocks_left": stats.garbage,
                                        "freed_blocks_in_grace": stats.freed, "started": t}))
    if req.kind == "decommission":
        return await _decommission(ctx, req.node)
    node = getattr(req, "node", None)  # a scrub's (the schema gives a rebalance none)
    return job_view(await ctx.cluster.namenode.job_start(req.kind, node))
