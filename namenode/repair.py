"""Re-replication and read repair: the NameNode's copy orders, delivered to DataNodes in heartbeat replies.

A DataNode silent for longer than the heartbeat timeout is dead. The RepairWorker sweeps the block lists of files,
uploaded parts and noncurrent versions (a paced scan, `scan_batch` records per pass), and for every block with a dead
holder orders a live holder to copy it to a new node with room (chosen by the pure `placement.plan_repairs`, never a
node with `reserve_bytes` or less free once the copies already ordered to it are counted). The sweep counts as it
goes (under-replicated, lost, waiting and why), independently of how many copies may be out, and queues the blocks
to copy (at most QUEUE_MAX); the queue is drained into copy orders by each pass and each heartbeat. A copy order
carries the blocks going from one source to one target, up to `batch_bytes` (many small blocks, or a few large
ones): it waits in memory until the source's next heartbeat takes it; the source pushes its blocks with one
`put_replicas` call per `batch_bytes` and confirms in its next heartbeat (sent early when a copy order finishes);
the confirmations of one heartbeat update the replica sets in one metadata batch (the dead node's copy becomes
garbage, deleted if it ever comes back). At most `max_inflight` copy orders are out at once, so repair traffic
leaves training reads their bandwidth; an order not confirmed within `order_timeout_s` (its source died, the reply
was lost) is dropped and planned again, from the next live holder. A block whose copy failed (the target refused
it for lack of space, was unreachable, the source lacked the block) waits before it is ordered again, 1 s doubling
to RETRY_MAX_S; failures and waiting blocks are logged at most every LOG_EVERY_S and counted in `status()`.

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
from dataclasses import dataclass, field, replace

from epochfs.common import errors, messages as m
from epochfs.common.blocks import block_entry, block_id, block_nodes, block_size
from epochfs.common.worker import PassStats, Worker

from .membership import DECOMMISSIONED, DECOMMISSIONING, Membership
from .metastore import MetaStore
from .placement import ClusterView, can_take, plan_repairs, repair_source, shortage

log = logging.getLogger("epochfs.namenode.repair")

QUEUE_MAX = 100_000  # blocks found by the sweep and waiting for a copy order (the sweep finds the rest again)
BATCH_MAX_BLOCKS = 512  # blocks per copy order, whatever their size
RETRY_BASE_S, RETRY_MAX_S = 1.0, 60.0  # a block whose copy failed waits this long, doubling, before the next order
LOG_EVERY_S = 30.0
# why a copy failed (the DataNode's error class) -> the reason counted in `status()["waiting"]`
REASONS = {"NodeFull": "no_space", "NoSuchBlock": "bad_source", "CorruptBlock": "bad_source", "timeout": "timeout"}
SAY = {"no_space": "no space on the target", "no_node": "no node without a copy", "unreachable": "target unreachable",
       "bad_source": "source lacks the block", "timeout": "not confirmed in time"}


@dataclass
class Order:
    block_id: int
    source: int
    target: int
    replaces: int | None  # the dead holder `target` stands in for; None: rewrite target's own bad copy
    hint: bytes | None  # key of the metadata record holding the block list (where to update it)
    size: int = 0
    grow: bool = False  # `target` joins the replica set (a top-up)
    batch: Batch | None = None


@dataclass(eq=False)
class Batch:
    """One copy order: the blocks `source` copies to `target` in one go (handed over in one heartbeat reply)."""
    source: int
    target: int
    issued: float  # monotonic; reset when the order is handed to its source
    blocks: list[int] = field(default_factory=list)
    bytes: int = 0
    sent: bool = False


@dataclass
class Counts:
    under: int = 0
    lost: int = 0
    waiting: dict[str, int] = field(default_factory=dict)


class RepairWorker(Worker):
    def __init__(self, meta: MetaStore, members: Membership, *, interval_s: float = 1.0, max_inflight: int = 16,
                 order_timeout_s: float = 60.0, scan_batch: int = 10_000, bytes_per_s: int = 0,
                 batch_bytes: int = 8 << 20, reserve_bytes: int = 0) -> None:
        self.meta, self.members = meta, members
        self.interval_s, self.max_inflight = interval_s, max_inflight
        self.order_timeout_s, self.scan_batch = order_timeout_s, scan_batch
        self.bytes_per_s, self.batch_bytes, self.reserve_bytes = bytes_per_s, batch_bytes, reserve_bytes
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
        self.batches: set[Batch] = set()  # the copy orders out (each holds orders of `self.orders`)
        self._open: dict[tuple[int, int], Batch] = {}  # (source, target) -> its batch not yet handed over
        self._to: dict[int, int] = {}  # target -> bytes ordered to it and not yet confirmed
        self.queue: dict[int, tuple[bytes, list[int], int, int]] = {}  # block -> (hint, holders, size, wanted)
        self.attempts: dict[int, int] = {}  # block -> failed or expired orders (rotates the source, sets the wait)
        self.retry_at: dict[int, float] = {}  # block -> when it may be ordered again (monotonic)
        self.why: dict[int, str] = {}  # block -> why its last copy failed
        self._failures: dict[str, int] = {}  # reason -> failed copies since the last log line
        self._logged = float("-inf")
        self.cursor = b""
        self._sweep = Counts()  # counted so far in the current sweep
        self._last = Counts()  # as of the last complete sweep
        self._fixed = 0  # copies confirmed since the last complete sweep (each takes a block off `_last.under`)
        self.under_replicated = 0  # live: max(the current sweep so far, the last one less the copies confirmed since)
        self.lost = 0
        self.waiting: dict[str, int] = {}
        self.totals = {"repaired": 0, "read_repairs": 0, "failed": 0, "expired": 0, "topped_up": 0,
                       "surplus_deleted": 0, "gc_deleted": 0}
        self._dead: set[int] = set()
        self._gone: set[int] = set()

    # ---------------------------------------------------------------- the order book
    def _add(self, o: Order, now: float | None = None) -> None:
        key = (o.source, o.target)
        b = self._open.get(key)
        if b is None or (b.blocks and b.bytes + o.size > self.batch_bytes) or len(b.blocks) >= BATCH_MAX_BLOCKS:
            b = self._open[key] = Batch(o.source, o.target, time.monotonic() if now is None else now)
            self.batches.add(b)
        b.blocks.append(o.block_id)
        b.bytes += o.size
        o.batch = b
        self.orders[(o.block_id, o.target)] = o
        self._by_block[o.block_id] = self._by_block.get(o.block_id, 0) + 1
        self._to[o.target] = self._to.get(o.target, 0) + o.size
        self._tokens -= o.size

    def _joins(self, source: int, target: int, size: int) -> bool:
        """Would a copy from `source` to `target` join a copy order not yet handed over (needing no new one)?"""
        b = self._open.get((source, target))
        return b is not None and b.bytes + size <= self.batch_bytes and len(b.blocks) < BATCH_MAX_BLOCKS

    def _pop(self, block_id: int, target: int) -> Order | None:
        o = self.orders.pop((block_id, target), None)
        if o is None:
            return None
        left = self._by_block[block_id] - 1
        if left:
            self._by_block[block_id] = left
        else:
            del self._by_block[block_id]
        self._to[target] -= o.size
        if not self._to[target]:
            del self._to[target]
        b = o.batch
        b.blocks.remove(block_id)
        b.bytes -= o.size
        if not b.blocks:
            self.batches.discard(b)
            if self._open.get((b.source, b.target)) is b:
                del self._open[(b.source, b.target)]
        return o

    def _failed(self, block_id: int, reason: str, now: float) -> None:
        """A copy of the block failed: it waits (1 s, doubling with each failure) before it is ordered again."""
        n = self.attempts[block_id] = self.attempts.get(block_id, 0) + 1
        self.retry_at[block_id] = now + min(RETRY_BASE_S * 2 ** (n - 1), RETRY_MAX_S)
        self.why[block_id] = reason
        self._failures[reason] = self._failures.get(reason, 0) + 1

    def _succeeded(self, block_id: int) -> None:
        self.attempts.pop(block_id, None)
        self.retry_at.pop(block_id, None)
        self.why.pop(block_id, None)

    def _expire(self, now: float) -> None:
        for b in [b for b in self.batches if now - b.issued > self.order_timeout_s]:
            log.warning("copy order of %d blocks from node %s to node %s not confirmed within %.0fs: planned again",
                        len(b.blocks), b.source, b.target, self.order_timeout_s)
            for bid in list(b.blocks):
                self._pop(bid, b.target)
                self._failed(bid, "timeout", now)
                self.totals["expired"] += 1

    def on_heartbeat(self, node: int, copied: list, failed: list) -> list[list]:
        """Apply a DataNode's confirmations (one metadata batch) and failures ([block, target, error class]); return
        its new copy orders ([target node, target address, [block, ...]])."""
        now = time.monotonic()
        confirm = []
        for bid, target in copied:
            o = self._pop(int(bid), int(target))
            if o is None:
                self.meta.drop_stray_copy(int(bid), int(target))
                continue
            self._succeeded(o.block_id)
            self.totals["repaired"] += 1
            if o.replaces is not None or o.grow:
                confirm.append((o.block_id, o.replaces, o.target, o.hint))
            job = self.jobs.get(self._job_id(o.replaces)) if o.replaces is not None else None
            if job is not None and job["state"] == "running":
                job["done"] += 1
        if confirm:
            changed = self.meta.replace_replicas(confirm)
            self._fixed += sum(ok and (old in self._dead or old is None) for ok, (_, old, _, _) in zip(changed, confirm))
            self._publish()
        for bid, target, *why in failed:
            o = self._pop(int(bid), int(target))
            if o is not None:
                self._failed(o.block_id, REASONS.get(why[0] if why else "", "unreachable"), now)
                self.totals["failed"] += 1
        self._drain(now)
        out = []
        for b in self.batches:
            if b.source == node and not b.sent:
                st = self.members.nodes.get(b.target)
                if st is None:
                    continue
                b.sent, b.issued = True, now
                if self._open.get((b.source, b.target)) is b:
                    del self._open[(b.source, b.target)]
                out.append([b.target, st.addr, list(b.blocks)])
        return out

    def report_bad(self, block_id: int, node: int, good: int | None = None) -> bool:
        """A copy of `block_id` on `node` failed its CRC or is missing: order a good holder to re-push it. False when
        nothing can be done (no file refers to the block, `node` is not one of its holders, no other live holder)."""
        if (block_id, node) in self.orders or time.monotonic() < self.retry_at.get(block_id, 0.0):
            return True  # ordered already, or its last copy failed: the next waits (a reader may ask every time)
        loc = self.meta.find_block(block_id)
        if loc is None or node not in block_nodes(loc[1]):
            return False
        key, entry = loc
        if not self._repush(self.members.view(), block_id, node, block_nodes(entry), key, good, block_size(entry)):
            return False
        self.totals["read_repairs"] += 1
        log.warning("block %s on node %s is bad or missing: a good holder re-pushes it", block_id, node)
        return True

    def has_room(self) -> bool:
        """May another copy order be made now (the in-flight bound and the rate limit)?"""
        return len(self.batches) < self.max_inflight and not (self.bytes_per_s and self._tokens <= 0)

    def move(self, block_id: int, source: int, target: int, hint: bytes, size: int) -> bool:
        """Order `source` to copy a block to `target`, which takes its place in the replica set once confirmed (a
        rebalance move: copy first, then drop the old replica). Moves share the repairs' order book, in-flight bound
        and rate limit (check `has_room` first); False when the block already has an order out."""
        if block_id in self._by_block:
            return False
        self._add(Order(block_id, source, target, source, hint, size))
        return True

    def _repush(self, view: ClusterView, block_id: int, node: int, holders: list[int], hint: bytes,
                good: int | None = None, size: int = 0) -> bool:
        if any(n.id == node and n.read_only for n in view.nodes):  # its store refuses writes: copy elsewhere
            view = ClusterView(tuple(replace(n, draining=True) if n.id == node else n for n in view.nodes),
                               view.reserve_bytes)
            orders = plan_repairs(view, block_id, holders)
            for r in orders:
                self._add(Order(block_id, r.source, r.target, r.replaces, hint, size))
            return bool(orders)
        source = repair_source(view, holders, node, good)
        if source is None:
            return False
        self._add(Order(block_id, source, node, None, hint, size))
        return True

    # ---------------------------------------------------------------- block reports
    def take_report(self, node: int, blocks: list[int]) -> None:
        """A DataNode's full block report; reconciled on the next pass."""
        self.reports[node] = set(blocks)

    def _reconcile(self) -> None:
        """Compare the block reports received since the last pass with the metadata (one scan for all of them)."""
        reports, self.reports = self.reports, {}
        expected: dict[int, dict[int, tuple[bytes, list[int], int]]] = {n: {} for n in reports}
        after = b""
        while True:
            records, nxt = self.meta.scan_block_lists(after, self.scan_batch)
            for key, blocks in records:
                for blk in blocks:
                    for n in block_nodes(blk):
                        if n in expected:
                            expected[n][block_id(blk)] = (key, block_nodes(blk), block_size(blk))
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
                    key, holders, size = expected[node][bid]
                    self.totals["topped_up"] += self._repush(view, bid, node, holders, key, size=size)

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
            count += sum(node in block_nodes(blk) for _, blocks in records for blk in blocks)
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
        if retired and any(n in retired for blk in blocks for n in block_nodes(blk)):
            self._recheck = True

    def admit(self, blocks: list[m.WrittenBlock | int], acks: int) -> list:
        """The new blocks of a commit as they are stored: [id, size, crc, nodes]. Each comes from the gateway as a
        WrittenBlock, its `acks` the copies its primary acknowledged as durable (1 for async); a block
        with fewer than `acks` (the bucket's write policy now: a gateway's leased allocation may predate a switch
        to sync:N) refuses the whole commit with NotEnoughReplicas. A secondary whose store refuses writes (placed
        before it said so) is left out of the replica set, which repair tops up elsewhere. Entries that are bare
        block ids (the POSIX commit's kept blocks) pass as they are."""
        read_only = {n.id for n in self.members.nodes.values() if n.write_error}
        out, short = [], []
        for x in blocks:
            if isinstance(x, int):
                out.append(x)
                continue
            if x.acks < acks:
                raise errors.NotEnoughReplicas(f"block {x.id}: {x.acks} copies acknowledged, the bucket's write "
                                               f"policy wants {acks}")
            nodes = [n for i, n in enumerate(x.nodes) if i == 0 or n not in read_only]
            if len(nodes) < len(x.nodes):
                short.append((x.id, len(x.nodes)))
            out.append(block_entry(x.id, x.size, x.crc, nodes))
        if short:
            self.mark_short(short)
        return out

    def mark_short(self, blocks: list[tuple[int, int]]) -> None:
        self.meta.mark_short(blocks)
        self.short.update(blocks)

    # ---------------------------------------------------------------- one pass
    def _note_membership(self, dead: set[int], gone: set[int]) -> None:
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
        if gone != self._gone:  # count afresh; what was queued may be moot (a node is back)
            if self._gone - gone:
                self._last, self._fixed = Counts(), 0
            self.cursor, self._sweep, self.queue = b"", Counts(), {}
            self._remaining, self._short_done, self._short_seen = {}, set(), set()
        self._dead, self._gone = dead, gone

    def _refill(self, now: float) -> None:
        if self.bytes_per_s:
            self._tokens = min(self._tokens + (now - self._refilled) * self.bytes_per_s, float(self.bytes_per_s))
        self._refilled = now

    def _view(self) -> ClusterView:
        """The cluster as placement sees it, each node's free space less the copies ordered to it."""
        return self.members.view(self.reserve_bytes, ordered=self._to)

    def _can_grow(self, view: ClusterView) -> bool:
        """Could any short block get a replica now (enough open nodes for the smallest wanted count)?"""
        if not self.short:
            return False
        open_nodes = sum(1 for n in view.nodes if can_take(view, n))
        return open_nodes >= min(self.short.values())

    def _drain(self, now: float) -> int:
        """Turn queued blocks into copy orders while the in-flight bound and the rate limit allow; returns the
        copies ordered. Each block is planned again on the current view (a node may be back, or have filled up)."""
        if not self.queue:
            return 0
        self._refill(now)
        view = self._view()
        free = {n.id: n.free_bytes for n in view.nodes}  # less what this drain orders
        issued = 0
        for bid in list(self.queue):
            if self.bytes_per_s and self._tokens <= 0:
                break
            hint, holders, size, wanted = self.queue[bid]
            if bid in self._by_block:
                del self.queue[bid]
                continue
            plan = plan_repairs(view, bid, holders, self.attempts.get(bid, 0), wanted)
            if not all(self._joins(r.source, r.target, size) for r in plan) and len(self.batches) >= self.max_inflight:
                break
            del self.queue[bid]
            for r in plan:
                self._add(Order(bid, r.source, r.target, r.replaces, hint, size, grow=r.grow), now)
                issued += 1
                free[r.target] -= size
                if free[r.target] <= self.reserve_bytes:  # full once these copies land: place on the others
                    view = self._view()
                    free = {n.id: n.free_bytes for n in view.nodes}
        return issued

    def _sweep_step(self, view: ClusterView, dead: set[int], gone_nodes: set[int], now: float) -> None:
        """Read the next `scan_batch` records: count every block with a dead or missing holder, queue those that
        can be copied now."""
        records, nxt = self.meta.scan_block_lists(self.cursor, self.scan_batch)
        sw = self._sweep
        for key, blocks in records:
            for blk in blocks:
                bid, size, holders = block_id(blk), block_size(blk), block_nodes(blk)
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
                    self._remaining[n] = self._remaining.get(n, 0) + 1
                sw.under += grow or any(n in dead for n in holders)
                if all(n in dead for n in holders):
                    sw.lost += 1
                    continue
                if bid in self._by_block:
                    continue
                if now < self.retry_at.get(bid, 0.0):
                    reason = self.why[bid]
                elif plan_repairs(view, bid, holders, self.attempts.get(bid, 0), wanted):
                    if len(self.queue) < QUEUE_MAX:
                        self.queue[bid] = (key, holders, size, wanted)
                    continue
                else:
                    reason = shortage(view, holders)
                sw.waiting[reason] = sw.waiting.get(reason, 0) + 1
        if records:
            self.cursor = records[-1][0]
        if nxt is None:  # the sweep is complete
            self._last, self._fixed = sw, 0
            self._finish_sweep()
            self._recheck = any(self._remaining.get(n) for n in self.members.draining())
            self.cursor, self._sweep = b"", Counts()
            self._remaining, self._short_done, self._short_seen = {}, set(), set()

    def _publish(self) -> None:
        """The live figures: what the current sweep counted so far, or the last sweep's less the copies confirmed
        since, whichever is more (a sweep under way has not seen every block yet)."""
        sw, last = self._sweep, self._last
        self.under_replicated = max(sw.under, last.under - self._fixed, 0)
        self.lost = max(sw.lost, last.lost)
        self.waiting = {r: max(sw.waiting.get(r, 0), last.waiting.get(r, 0))
                        for r in sw.waiting.keys() | last.waiting.keys()}

    def _log(self, now: float) -> None:
        """At most every LOG_EVERY_S: the copies that failed since the last line, and the blocks left waiting."""
        if now - self._logged < LOG_EVERY_S or not (self._failures or self.waiting):
            return
        if self._failures:
            log.warning("%d copies failed (%s); those blocks are ordered again after a wait (up to %.0fs)",
                        sum(self._failures.values()),
                        ", ".join(f"{SAY.get(r, r)}: {n}" for r, n in sorted(self._failures.items())), RETRY_MAX_S)
        if self.waiting:
            log.warning("%d under-replicated blocks wait for a copy (%s)", sum(self.waiting.values()),
                        ", ".join(f"{SAY.get(r, r)}: {n}" for r, n in sorted(self.waiting.items())))
        self._failures, self._logged = {}, now

    async def run_once(self) -> PassStats:
        now = time.monotonic()
        self._expire(now)
        self._refill(now)
        if self.reports:
            self._reconcile()
        dead = self.members.dead()
        leaving = {n.id for n in self.members.nodes.values() if n.admin == DECOMMISSIONING}
        self._note_membership(dead, dead | self.members.draining())
        for n in leaving:
            self._decommission_job(self.members.nodes[n])
        view = self._view()
        if dead or leaving or self._recheck or self._can_grow(view):
            self._sweep_step(view, dead, self._gone, now)
        else:  # nothing to copy: only short blocks that can't grow (too few nodes with room) are under-replicated
            self.cursor, self._sweep, self.queue, self._fixed = b"", Counts(), {}, 0
            self._remaining, self._short_done, self._short_seen = {}, set(), set()
            self._last = Counts(len(self.short), 0, {shortage(view, []): len(self.short)} if self.short else {})
        issued = self._drain(now)
        self._publish()
        self._log(now)
        return PassStats(ok=issued)

    def status(self) -> dict:
        return {"under_replicated": self.under_replicated, "lost": self.lost, "waiting": self.waiting,
                "repairs_in_flight": len(self.orders), "copy_orders": len(self.batches), "queued": len(self.queue),
                "dead_nodes": sorted(self._dead), "short_blocks": len(self.short), **self.totals}
