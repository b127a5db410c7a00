"""Operator calls: DataNodes as the operator sees them, decommission, and the jobs (repair, scrub, rebalance)."""
from __future__ import annotations

import dataclasses
import time

from epochfs.common import messages as m

from .services import Services

_JOB_FIELDS = ("id", "kind", "state", "node", "progress")


def job_info(j: dict) -> m.JobInfo:
    return m.JobInfo(id=str(j["id"]), kind=j["kind"], state=j["state"], node=j.get("node"),
                     progress=j.get("progress"), detail={k: v for k, v in j.items() if k not in _JOB_FIELDS})


def handlers(s: Services) -> dict:
    members, repair, ops = s.members, s.repair, s.ops

    async def nodes(req: m.Nodes, _) -> m.NodeList:
        now = time.monotonic()
        jobs = {j["node"]: j for j in repair.jobs_list() if j["kind"] == "decommission"}
        return m.NodeList(nodes=[m.NodeInfo(
            **dataclasses.asdict(n), alive=members.alive(n),
            heartbeat_age_s=round(now - n.last_seen, 3) if n.last_seen else None, state=members.state(n, now),
            replication_lag=m.ReplicationLag(queued=n.extra.get("queued", 0), oldest_s=n.extra.get("oldest_s", 0.0),
                                             no_space=n.extra.get("no_space", 0)),
            decommission=m.JobProgress(done=jobs[n.id]["done"], total=jobs[n.id]["total"],
                                       progress=jobs[n.id]["progress"]) if n.id in jobs else None)
            for n in members.nodes.values()])

    async def decommission(req: m.Decommission, _) -> m.JobInfo:
        return job_info(repair.decommission(req.node))

    async def jobs(req: m.Jobs, _) -> m.JobList:
        lc = s.lifecycle.jobs_list() if s.lifecycle is not None else []
        return m.JobList(jobs=[job_info(j) for j in repair.jobs_list() + ops.jobs_list() + lc])

    async def job_start(req: m.JobStart, _) -> m.JobInfo:
        return job_info(ops.start(req.kind, req.node))

    return {m.Nodes: nodes, m.Decommission: decommission, m.Jobs: jobs, m.JobStart: job_start}
