"""Re-replication and read repair: the NameNode's copy orders, delivered to DataNodes in heartbeat replies.

A DataNode silent for longer than the heartbeat timeout is dead. The RepairWorker sweeps the block lists of files,
uploaded parts and noncurrent versions (a paced scan, `scan_batch` records per pass), and for every block with a dead
holder orders a live holder to copy it to a new node (chosen by the pure `placement.plan_repairs`). Orders wait in
memory until the source's next heartbeat takes them; the source pushes the block with `put_replica` and confirms in
the heartbeat after; the confirmations of one heartbeat update the replica sets in one metadata batch (the dead
node's copy becomes garbage, deleted if it ever comes back). At most `max_inflight` orders are out at once, so repair
traffic leaves training reads their bandwidth; an order not confirmed within `order_timeout_s` (its source died, the
reply was lost) is dropped and planned again, from the next live holder.

Read repair uses the same orders: a reader (the gateway) or a DataNode's scrubber that found a bad or missing copy
calls `report_bad`, and a good holder re-pushes the block to the bad one; the replica set does not change.

Decommission and top-up use the same sweep: a decommissioning node's blocks are copied to other nodes while it still
serves reads, and the copy takes its place in the replica set only once confirmed (so a block never has fewer live
replicas than before); when no block refers to it any more the node is DECOMMISSIONED. A block written with fewer
replicas than wanted (nodes down or full at write time, `MetaStore.mark_short`) gets the missing ones added.
Copies are ordered at most `bytes_per_s` per second besides the `max_inflight` bound.

Block reports (every DataNode's full list of blocks, sent periodically with a heartbeat) reconcile a node with the
metadata: a copy no file needs there (unreferenced, or the node is not among its holders: over-replicated, stale
after a repair) is deleted, and a copy the metadata expects but the node lacks is re-pushed. Both act only on what
two consecutive reports agree on, so that writes and copies racing the report are left alone.

Every dead or decommissioning node has a job (`jobs()`): blocks moved so far (`done`) out of `total`.
Rebalance moves (namenode/jobs.py) go through the same order book with `move`.

Orders live only in memory: after a NameNode restart the sweep finds the same blocks again.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from epochfs.common import errors
from epochfs.common.worker import PassStats, Worker

from .membership import DECOMMISSIONED, DECOMMISSIONING, Membership
from .metastore import MetaStore
from .placement import ClusterView, plan_repairs, repair_source

log = logging.getLogger("epochfs.namenode.repair")


@dataclass
class Order:
    block_id: int
    source: int
    target: int
    replaces: int | None  # the dead holder `target` stands in for; None: rewrite target's own bad copy
    hint: bytes | None  # key of the metadata record holding the block list (where to update it)
    issued: float  # monotonic; reset when the order is handed to its source
    sent: bool = False
    grow: bool = False  # `target` joins the replica set (a top-up)


class RepairWorker(Worker):
    def __init__(self, meta: MetaStore, members: Membership, *, interval_s: float = 1.0, max_inflight: int = 16,
                 order_timeout_s: float = 60.0, scan_batch: int = 10_000, bytes_per_s: int = 0) -> None:
        self.meta, self.members = meta, members
        self.interval_s, self.max_inflight = interval_s, max_inflight
        self.order_timeout_s, self.scan_batch = order_timeout_s, scan_batch
        self.bytes_per_s = bytes_per_s
        self._tokens, self._refilled = float(bytes_per_s), time.monotonic()
        self.short = meta.short_blocks()  # block -> replicas wanted, for blocks written with fewer
        self._short_done: set[int] = set()  # short blocks seen at full strength (or gone) in this sweep
        self._short_seen: set[int] = set()
        self._remaining: dict[int, int] = {}  # this sweep: blocks still referring to each dead/decommissioning node
        self._recheck = False  # a commit named a decommissioned node: sweep until none does
        self.jobs: dict[str, dict] = {}  # job id -> job; one per dead or decommissioning node
        self.reports: dict[int, set[int]] = {}  # node -> its latest block report, not yet reconciled
        self._suspects: dict[int, tuple[set[int], set[int]]] = {}  # node -> (surplus, missing) of its last report
        self.orders: dict[tuple[int, int], Order] = {}  # (block, target) -> order
        self._by_block: dict[int, int] = {}  # block -> orders out for it
        self.attempts: dict[int, int] = {}  # block -> failed or expired orders (rotates the source)
        self.cursor = b""
        self._sweep = [0, 0]  # under-replicated and lost blocks seen so far in the current sweep
        self.under_replicated = 0  # as of the last complete sweep
        self.lost = 0
        self.totals = {"repaired": 0, "read_repairs": 0, "failed": 0, "expired": 0, "topped_up": 0,
                       "surplus_deleted": 0, "gc_deleted": 0}
        self._dead: set[int] = set()

    # ---------------------------------------------------------------- the order book
    def _add(self, o: Order) -> None:
        self.orders[(o.block_id, o.target)] = o
        self._by_block[o.block_id] = self._by_block.get(o.block_id, 0) + 1

    def _pop(self, block_id: int, target: int) -> Order | None:
        o = self.orders.pop((block_id, target), None)
        if o is not None:
            left = self._by_block[block_id] - 1
            if left:
                self._by_block[block_id] = left
            else:
                del self._by_block[block_id]
        return o

    def _expire(self, now: float) -> None:
        for o in [o for o in self.orders.values() if now - o.issued > self.order_timeout_s]:
            self._pop(o.block_id, o.target)
            self.attempts[o.block_id] = self.attempts.get(o.block_id, 0) + 1
            self.totals["expired"] += 1
            log.warning("repair of block %s from node %s to node %s timed out", o.block_id, o.source, o.target)

    def on_heartbeat(self, node: int, copied: list, failed: list) -> list[list]:
        """Apply a DataNode's confirmations (one metadata batch) and failures; return its new orders
        ([block, target node, target address])."""
        confirm = []
        for bid, target in copied:
            o = self._pop(int(bid), int(target))
            if o is None:
                self.meta.drop_stray_copy(int(bid), int(target))
                continue
            self.attempts.pop(o.block_id, None)
            self.totals["repaired"] += 1
            if o.replaces is not None or o.grow:
                confirm.append((o.block_id, o.replaces, o.target, o.hint))
            job = self.jobs.get(self._job_id(o.replaces)) if o.replaces is not None else None
            if job is not None and job["state"] == "running":
                job["done"] += 1
        if confirm:
            self.meta.replace_replicas(confirm)
        for bid, target in failed:
            o = self._pop(int(bid), int(target))
            if o is not None:
                self.attempts[o.block_id] = self.attempts.get(o.block_id, 0) + 1
                self.totals["failed"] += 1
        out = []
        now = time.monotonic()
        for o in self.orders.values():
            if o.source == node and not o.sent:
                st = self.members.nodes.get(o.target)
                if st is None:
                    continue
                o.sent, o.issued = True, now
                out.append([o.block_id, o.target, st.addr])
        return out

    def report_bad(self, block_id: int, node: int, good: int | None = None) -> bool:
        """A copy of `block_id` on `node` failed its CRC or is missing: order a good holder to re-push it. False when
        nothing can be done (no file refers to the block, `node` is not one of its holders, no other live holder)."""
        if (block_id, node) in self.orders:
            return True
        loc = self.meta.find_block(block_id)
        if loc is None or node not in loc[1][3]:
            return False
        if not self._repush(self.members.view(), block_id, node, loc[1][3], loc[0], good):
            return False
        self.totals["read_repairs"] += 1
        log.warning("block %s on node %s is bad or missing: a good holder re-pushes it", block_id, node)
        return True

    def has_room(self) -> bool:
        """May another copy be ordered now (the in-flight bound and the rate limit)?"""
        return len(self.orders) < self.max_inflight and not (self.bytes_per_s and self._tokens <= 0)

    def move(self, block_id: int, source: int, target: int, hint: bytes, size: int) -> bool:
        """Order `source` to copy a block to `target`, which takes its place in the replica set once confirmed (a
        rebalance move: copy first, then drop the old replica). Moves share the repairs' order book, in-flight bound
        and rate limit (check `has_room` first); False when the block already has an order out."""
        if block_id in self._by_block:
            return False
        self._add(Order(block_id, source, target, source, hint, time.monotonic()))
        self._tokens -= size
        return True

    def _repush(self, view: ClusterView, block_id: int, node: int, holders: list[int], hint: bytes,
                good: int | None = None) -> bool:
        source = repair_source(view, holders, node, good)
        if source is None:
            return False
        self._add(Order(block_id, source, node, None, hint, time.monotonic()))
        return True

    # ---------------------------------------------------------------- block reports
    def take_report(self, node: int, blocks: list[int]) -> None:
        """A DataNode's full block report; reconciled on the next pass."""
        self.reports[node] = set(blocks)

    def _reconcile(self) -> None:
        """Compare the block reports received since the last pass with the metadata (one scan for all of them)."""
        reports, self.reports = self.reports, {}
        expected: dict[int, dict[int, tuple[bytes, list[int]]]] = {n: {} for n in reports}
        after = b""
        while True:
            records, nxt = self.meta.scan_block_lists(after, self.scan_batch)
            for key, blocks in records:
                for blk in blocks:
                    for n in blk[3]:
                        if n in expected:
                            expected[n][blk[0]] = (key, blk[3])
            if nxt is None:
                break
            after = nxt
        pending = self.meta.pending_on()
        freed = self.meta.freed_on()  # copies left for reads begun before their file changed: not surplus yet
        view = self.members.view()
        for node, have in reports.items():
            ordered = {bid for bid, target in self.orders if target == node}
            surplus = have - expected[node].keys() - pending.keys() - ordered - freed.get(node, set())
            missing = expected[node].keys() - have - ordered
            prev_surplus, prev_missing = self._suspects.get(node, (set(), set()))
            self._suspects[node] = (surplus, missing)
            surplus, missing = surplus & prev_surplus, missing & prev_missing
            if surplus:
                log.warning("node %s holds %d copies no file needs there: deleting them", node, len(surplus))
                self.meta.add_garbage(node, surplus)
                self.totals["surplus_deleted"] += len(surplus)
            st = self.members.nodes.get(node)
            if missing and st is not None and self.members.alive(st) and not st.admin:
                log.warning("node %s lacks %d copies it should hold: re-pushing them", node, len(missing))
                for bid in missing:
                    key, holders = expected[node][bid]
                    self.totals["topped_up"] += self._repush(view, bid, node, holders, key)

    # ---------------------------------------------------------------- decommission and jobs
    @staticmethod
    def _job_id(node: int) -> str:
        return f"node-{node}"

    def _start_job(self, kind: str, node: int) -> dict:
        job = {"id": self._job_id(node), "kind": kind, "node": node, "state": "running", "done": 0,
               "total": self._count_on(node), "started": time.time()}
        self.jobs[job["id"]] = job
        return job

    def _count_on(self, node: int) -> int:
        """Blocks whose replica set includes `node` (one scan of every block list; once per job)."""
        count, after = 0, b""
        while True:
            records, nxt = self.meta.scan_block_lists(after, self.scan_batch)
            count += sum(node in blk[3] for _, blocks in records for blk in blocks)
            if nxt is None:
                return count
            after = nxt

    def decommission(self, node: int) -> dict:
        """Start draining `node` (idempotent): it gets no new blocks, each of its blocks is copied to another node
        and the copy replaces it in the replica set; then it is decommissioned. Returns its job."""
        st = self.members.nodes.get(node)
        if st is None:
            raise errors.NotFound(f"no DataNode {node}")
        if not st.admin:
            self.members.set_admin(node, DECOMMISSIONING)
            log.warning("node %s: decommission started", node)
        return self._decommission_job(st)

    def _decommission_job(self, st) -> dict:
        job = self.jobs.get(self._job_id(st.id))
        if job is None or job["kind"] != "decommission":  # new, or after a NameNode restart
            job = self._start_job("decommission", st.id)
            if st.admin == DECOMMISSIONED:
                job.update(state="done")
        return job

    def jobs_list(self) -> list[dict]:
        """Re-replication and decommission jobs (one per node) and garbage collection, with their progress."""
        out = []
        for j in self.jobs.values():
            total = j["total"]
            out.append({**j, "progress": 1.0 if j["state"] == "done" else
                        (round(min(j["done"] / total, 1.0), 4) if total else None)})
        left = self.meta.garbage_count()
        deleted = self.totals["gc_deleted"]
        out.append({"id": "gc", "kind": "gc", "node": None, "state": "running" if left else "idle",
                    "done": deleted, "total": deleted + left,
                    "progress": round(deleted / (deleted + left), 4) if left else 1.0})
        return out

    def _finish_sweep(self) -> None:
        """A sweep is complete: update the jobs, finish decommissions, retire short-block records."""
        out_for = {o.replaces for o in self.orders.values()}
        for job in self.jobs.values():
            if job["state"] != "running":
                continue
            n = job["node"]
            left = self._remaining.get(n, 0)
            if left or n in out_for:
                continue
            job["total"] = job["done"]  # exact once finished
            if job["kind"] == "decommission":
                self.members.set_admin(n, DECOMMISSIONED)
                log.warning("node %s decommissioned", n)
            job.update(state="done", finished=time.time())
        pending = None
        gone = set()
        for bid in self.short:
            if bid in self._short_done:
                gone.add(bid)
            elif bid not in self._short_seen:
                if pending is None:
                    pending = self.meta.pending_on()
                if bid not in pending:
                    gone.add(bid)  # deleted, or never committed
        if gone:
            self.meta.drop_short(gone)
            for bid in gone:
                self.short.pop(bid, None)

    def check_commit(self, blocks: list) -> None:
        """A commit whose blocks name a decommissioned node (placed before its decommission started, e.g. from a
        gateway's leased allocation): sweep again, which moves those copies like a dead node's."""
        retired = {n.id for n in self.members.nodes.values() if n.admin == DECOMMISSIONED}
        if retired and any(n in retired for blk in blocks for n in blk[3]):
            self._recheck = True

    def mark_short(self, blocks: list[tuple[int, int]]) -> None:
        self.meta.mark_short(blocks)
        self.short.update(blocks)

    # ---------------------------------------------------------------- one pass
    def _note_membership(self, dead: set[int]) -> None:
        for n in dead - self._dead:
            log.warning("node %s declared dead (silent for more than %.1fs)", n, self.members.timeout_s)
            job = self.jobs.get(self._job_id(n))
            if job is None or job["state"] != "running":
                self._start_job("re-replication", n)
        for n in self._dead - dead:
            log.info("node %s is alive again", n)
            job = self.jobs.get(self._job_id(n))
            if job is not None and job["kind"] == "re-replication" and job["state"] == "running":
                job.update(state="cancelled", finished=time.time())  # the blocks not yet moved stay on it
        self._dead = dead

    def _refill(self, now: float) -> None:
        if self.bytes_per_s:
            self._tokens = min(self._tokens + (now - self._refilled) * self.bytes_per_s, float(self.bytes_per_s))
        self._refilled = now

    def _can_grow(self, view: ClusterView) -> bool:
        """Could any short block get a replica now (enough open nodes for the smallest wanted count)?"""
        if not self.short:
            return False
        open_nodes = sum(1 for n in view.nodes if n.alive and not n.draining and n.free_bytes > view.reserve_bytes)
        return open_nodes >= min(self.short.values())

    async def run_once(self) -> PassStats:
        now = time.monotonic()
        self._expire(now)
        self._refill(now)
        if self.reports:
            self._reconcile()
        dead = self.members.dead()
        self._note_membership(dead)
        leaving = {n.id for n in self.members.nodes.values() if n.admin == DECOMMISSIONING}
        for n in leaving:
            self._decommission_job(self.members.nodes[n])
        view = self.members.view()
        if not (dead or leaving or self._recheck or self._can_grow(view)):
            self.under_replicated = self.lost = 0
            self.cursor, self._sweep = b"", [0, 0]
            self._remaining, self._short_done, self._short_seen = {}, set(), set()
            return PassStats()
        room = self.max_inflight - len(self.orders)
        if room <= 0:
            return PassStats()
        gone_nodes = dead | self.members.draining()
        records, nxt = self.meta.scan_block_lists(self.cursor, self.scan_batch)
        issued = 0
        for key, blocks in records:
            under = lost = 0
            remaining: dict[int, int] = {}
            for blk in blocks:
                bid, holders = blk[0], blk[3]
                wanted = self.short.get(bid, 0)
                if wanted:
                    self._short_seen.add(bid)
                gone = [n for n in holders if n in gone_nodes]
                grow = wanted > len(holders)
                if not gone and not grow:
                    if wanted:
                        self._short_done.add(bid)
                    continue
                for n in gone:
                    remaining[n] = remaining.get(n, 0) + 1
                under += grow or any(n in dead for n in holders)
                lost += all(n in dead for n in holders)
                if bid in self._by_block:
                    continue
                if room <= 0 or (self.bytes_per_s and self._tokens <= 0):
                    break
                for r in plan_repairs(view, bid, holders, self.attempts.get(bid, 0), wanted):
                    self._add(Order(bid, r.source, r.target, r.replaces, key, time.monotonic(), grow=r.grow))
                    room -= 1
                    self._tokens -= blk[1]
                    issued += 1
            else:
                self._sweep[0] += under
                self._sweep[1] += lost
                for n, c in remaining.items():
                    self._remaining[n] = self._remaining.get(n, 0) + c
                self.cursor = key
                continue
            break  # out of room or budget: this record is read again (and counted) next pass
        else:
            if nxt is None:  # the sweep is complete
                self.under_replicated, self.lost = self._sweep
                self._finish_sweep()
                self._recheck = any(self._remaining.get(n) for n in self.members.draining())
                self.cursor, self._sweep = b"", [0, 0]
                self._remaining, self._short_done, self._short_seen = {}, set(), set()
        return PassStats(ok=issued)

    def status(self) -> dict:
        return {"under_replicated": self.under_replicated, "lost": self.lost, "repairs_in_flight": len(self.orders),
                "dead_nodes": sorted(self._dead), "short_blocks": len(self.short), **self.totals}
