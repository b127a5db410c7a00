"""Jobs an operator starts (admin API `POST /admin/v1/jobs`, `epochfs admin jobs`): scrub and rebalance.

Scrub: every live DataNode (or the one asked for) is told in its next heartbeat reply to run a full scrub pass now,
from its first chunk to its last at the scrubber's pace; it reports the pass's progress (bytes and blocks checked,
bad blocks found) in its heartbeats, and the bad blocks it finds are repaired the read-repair way. A node that dies
before it finishes makes the job `failed`; a node that restarts mid-pass is told again and starts over.

Rebalance: replicas move from the nodes storing the most bytes to those storing the least (`placement.rebalance_move`)
until every node taking part (alive, not draining) stores within `tolerance` of the mean, or no move narrows a gap.
A move is a copy order in the repair worker's order book (`RepairWorker.move`): the target takes the source's place
in the replica set only once its copy is confirmed and the old copy then becomes garbage, so a block never has fewer
replicas than its factor. Moves share the repairs' in-flight bound and rate limit and wait while any block is
under-replicated (repairs first); blocks with a dead or draining holder are left to repair. Like the repair worker,
the job sweeps the block lists `scan_batch` records per pass; the bytes per node are counted from the metadata at
the start of each sweep (plus the moves still out), and the job is done after a sweep that needed no move.

Jobs live in memory, like repair orders: a NameNode restart forgets them.
"""
from __future__ import annotations

import logging
import math
import time
import uuid

from epochfs.common import errors
from epochfs.common.blocks import block_id, block_nodes, block_size
from epochfs.common.worker import PassStats, Worker

from .membership import Membership
from .metastore import MetaStore
from .placement import rebalance_move
from .repair import RepairWorker

log = logging.getLogger("epochfs.namenode.jobs")

SCRUB, REBALANCE = "scrub", "rebalance"
FINISHED_PARTS = ("done", "lost")
KEEP_FINISHED = 20  # finished jobs listed, at most


class OperatorJobs(Worker):
    def __init__(self, meta: MetaStore, members: Membership, repair: RepairWorker, *, interval_s: float = 1.0,
                 tolerance: float = 0.05, scan_batch: int = 10_000, reserve_bytes: int = 0) -> None:
        self.meta, self.members, self.repair = meta, members, repair
        self.interval_s, self.tolerance, self.scan_batch = interval_s, tolerance, scan_batch
        self.reserve_bytes = reserve_bytes  # a node with this much free space or less takes no moves
        self.jobs: dict[str, dict] = {}
        self._moves: dict[tuple[int, int], tuple[int, int, bytes]] = {}  # (block, target) -> (source, size, hint)
        self._load: dict[int, int] | None = None  # this sweep's bytes per node, moves planned included
        self._cursor = b""
        self._issued = 0  # moves ordered in this sweep

    # ---------------------------------------------------------------- starting and listing
    def start(self, kind: str, node: int | None = None) -> dict:
        """Start a job (or return the running one of that kind: one at a time)."""
        if kind not in (SCRUB, REBALANCE):
            raise errors.InvalidInput(f"unknown job kind {kind!r} (scrub or rebalance)")
        if kind == REBALANCE and node is not None:
            raise errors.InvalidInput("a rebalance job takes no node")
        nodes = self._scrub_nodes(node) if kind == SCRUB else []
        running = self._running(kind)
        if running is not None:
            return self.view(running)
        job = {"id": f"{kind}-{uuid.uuid4().hex[:8]}", "kind": kind, "node": node, "state": "running", "done": 0,
               "total": 0, "started": time.time()}
        if kind == SCRUB:
            job.update(blocks=0, bad=0, parts={str(n): {"state": "ordered", "bytes": 0, "total": 0, "blocks": 0,
                                                         "bad": 0} for n in nodes})
        else:
            job.update(bytes_moved=0, spread=None)
            self._moves, self._load, self._cursor, self._issued = {}, None, b"", 0
        self._forget_old()
        self.jobs[job["id"]] = job
        log.warning("%s job %s started", kind, job["id"])
        return self.view(job)

    def _scrub_nodes(self, node: int | None) -> list[int]:
        live = [n.id for n in self.members.nodes.values() if self.members.alive(n)]
        if node is None:
            if not live:
                raise errors.Conflict("no live DataNode to scrub")
            return live
        if node not in self.members.nodes:
            raise errors.NotFound(f"no DataNode {node}")
        if node not in live:
            raise errors.Conflict(f"DataNode {node} is not alive")
        return [node]

    def _running(self, kind: str) -> dict | None:
        return next((j for j in self.jobs.values() if j["kind"] == kind and j["state"] == "running"), None)

    def _forget_old(self) -> None:
        finished = [i for i, j in self.jobs.items() if j["state"] != "running"]
        for i in finished[:max(len(finished) - KEEP_FINISHED + 1, 0)]:
            del self.jobs[i]

    @staticmethod
    def view(job: dict) -> dict:
        total = job["total"]
        progress = 1.0 if job["state"] == "done" else round(min(job["done"] / total, 1.0), 4) if total else 0.0
        return {**job, "progress": progress}

    def jobs_list(self) -> list[dict]:
        return [self.view(j) for j in self.jobs.values()]

    def _finish(self, job: dict, state: str) -> None:
        job.update(state=state, finished=time.time())
        log.warning("%s job %s %s", job["kind"], job["id"], state)

    # ---------------------------------------------------------------- scrub
    def on_heartbeat(self, node: int, progress: dict | None) -> str | None:
        """Take a DataNode's scrub progress ({job, bytes, total, blocks, bad, done}); returns the id of a scrub job
        it should start a pass for, if any."""
        job = self._running(SCRUB)
        part = job["parts"].get(str(node)) if job else None
        if part is None or part["state"] in FINISHED_PARTS:
            return None
        if not progress or progress.get("job") != job["id"]:
            return job["id"]
        part.update(state="done" if progress.get("done") else "running",
                    **{k: int(progress.get(k) or 0) for k in ("bytes", "total", "blocks", "bad")})
        self._sum_scrub(job)
        return None

    def _sum_scrub(self, job: dict) -> None:
        parts = job["parts"].values()
        job.update({k: sum(p[key] for p in parts) for k, key in
                    (("done", "bytes"), ("total", "total"), ("blocks", "blocks"), ("bad", "bad"))})
        if all(p["state"] in FINISHED_PARTS for p in parts):
            self._finish(job, "done" if all(p["state"] == "done" for p in parts) else "failed")

    def _check_scrub(self, job: dict) -> None:
        """A node that died before finishing its pass: its part is lost."""
        for nid, part in job["parts"].items():
            st = self.members.nodes.get(int(nid))
            if part["state"] not in FINISHED_PARTS and (st is None or not self.members.alive(st)):
                part["state"] = "lost"
                log.warning("scrub job %s: node %s died before finishing its pass", job["id"], nid)
        self._sum_scrub(job)

    # ---------------------------------------------------------------- rebalance
    def _count_load(self) -> tuple[dict[int, int], float]:
        """Bytes stored per node taking part (alive, not draining), from the metadata, plus the moves still out; and
        the average replica size (to turn excess bytes into an estimate of moves, for the progress)."""
        load = {n.id: 0 for n in self.members.nodes.values() if self.members.alive(n) and not n.admin}
        replicas = stored = 0
        after = b""
        while True:
            records, nxt = self.meta.scan_block_lists(after, self.scan_batch)
            for _, blocks in records:
                for blk in blocks:
                    size, nodes = block_size(blk), block_nodes(blk)
                    replicas += len(nodes)
                    stored += size * len(nodes)
                    for n in nodes:
                        if n in load:
                            load[n] += size
            if nxt is None:
                break
            after = nxt
        for (_, target), (source, size, _) in self._moves.items():
            self._shift(load, source, target, size)
        return load, stored / replicas if replicas else 1.0

    @staticmethod
    def _shift(load: dict[int, int], source: int, target: int, size: int) -> None:
        if source in load:
            load[source] -= size
        if target in load:
            load[target] += size

    def _settle_moves(self, job: dict) -> None:
        """Moves whose order is gone: confirmed (the target replaced the source) or failed, expired."""
        for (bid, target), (source, size, hint) in list(self._moves.items()):
            if (bid, target) in self.repair.orders:
                continue
            del self._moves[(bid, target)]
            loc = self.meta.find_block(bid, hint)
            if loc is not None and target in block_nodes(loc[1]) and source not in block_nodes(loc[1]):
                job["done"] += 1
                job["bytes_moved"] += size
            elif self._load is not None:
                self._shift(self._load, target, source, size)

    def _start_sweep(self, job: dict) -> bool:
        """Count the bytes per node; False when they are balanced already (or fewer than two nodes take part)."""
        self._load, avg = self._count_load()
        if len(self._load) < 2:
            return False
        mean = sum(self._load.values()) / len(self._load)
        job["spread"] = max(self._load.values()) - min(self._load.values())
        excess = sum(max(v - mean, 0) for v in self._load.values())
        job["total"] = max(job["total"], job["done"] + len(self._moves) + math.ceil(excess / max(avg, 1.0)))
        return any(abs(v - mean) > self._slack(mean) for v in self._load.values())

    def _slack(self, mean: float) -> int:
        return int(self.tolerance * mean)

    def _rebalance_pass(self, job: dict) -> int:
        self._settle_moves(job)
        if self.repair.under_replicated or self.repair.lost:
            return 0  # repairs first
        if self._load is None and not self._start_sweep(job):
            if not self._moves:
                job["total"] = job["done"]
                self._finish(job, "done")
            self._load = None
            return 0
        load = self._load
        slack = self._slack(sum(load.values()) / len(load))
        view = self.members.view(reserve_bytes=self.reserve_bytes)
        records, nxt = self.meta.scan_block_lists(self._cursor, self.scan_batch)
        issued = 0
        for key, blocks in records:
            for blk in blocks:
                if not self.repair.has_room():
                    self._issued += issued
                    return issued  # this record is read again next pass
                bid, size = block_id(blk), block_size(blk)
                mv = rebalance_move(view, load, block_nodes(blk), size, slack)
                if mv is not None and self.repair.move(bid, mv[0], mv[1], key, size):
                    self._shift(load, mv[0], mv[1], size)
                    self._moves[(bid, mv[1])] = (mv[0], size, key)
                    issued += 1
            self._cursor = key
        self._issued += issued
        if nxt is None:  # the sweep is complete
            if not self._issued and not self._moves:
                job["total"] = job["done"]
                self._finish(job, "done")
            self._load, self._cursor, self._issued = None, b"", 0
        return issued

    # ---------------------------------------------------------------- one pass
    async def run_once(self) -> PassStats:
        scrub = self._running(SCRUB)
        if scrub is not None:
            self._check_scrub(scrub)
        rebalance = self._running(REBALANCE)
        return PassStats(ok=self._rebalance_pass(rebalance) if rebalance is not None else 0)
