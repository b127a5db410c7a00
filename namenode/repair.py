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

Orders live only in memory: after a NameNode restart the sweep finds the same blocks again.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from epochfs.common.worker import PassStats, Worker

from .membership import Membership
from .metastore import MetaStore
from .placement import plan_repairs, repair_source

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


class RepairWorker(Worker):
    def __init__(self, meta: MetaStore, members: Membership, *, interval_s: float = 1.0, max_inflight: int = 16,
                 order_timeout_s: float = 60.0, scan_batch: int = 10_000) -> None:
        self.meta, self.members = meta, members
        self.interval_s, self.max_inflight = interval_s, max_inflight
        self.order_timeout_s, self.scan_batch = order_timeout_s, scan_batch
        self.orders: dict[tuple[int, int], Order] = {}  # (block, target) -> order
        self._by_block: dict[int, int] = {}  # block -> orders out for it
        self.attempts: dict[int, int] = {}  # block -> failed or expired orders (rotates the source)
        self.cursor = b""
        self._sweep = [0, 0]  # under-replicated and lost blocks seen so far in the current sweep
        self.under_replicated = 0  # as of the last complete sweep
        self.lost = 0
        self.totals = {"repaired": 0, "read_repairs": 0, "failed": 0, "expired": 0}
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
            if o.replaces is not None:
                confirm.append((o.block_id, o.replaces, o.target, o.hint))
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
        source = repair_source(self.members.view(), loc[1][3], node, good)
        if source is None:
            return False
        self._add(Order(block_id, source, node, None, loc[0], time.monotonic()))
        self.totals["read_repairs"] += 1
        log.warning("block %s on node %s is bad: node %s re-pushes it", block_id, node, source)
        return True

    # ---------------------------------------------------------------- one pass
    def _note_membership(self, dead: set[int]) -> None:
        for n in dead - self._dead:
            log.warning("node %s declared dead (silent for more than %.1fs)", n, self.members.timeout_s)
        for n in self._dead - dead:
            log.info("node %s is alive again", n)
        self._dead = dead

    async def run_once(self) -> PassStats:
        self._expire(time.monotonic())
        dead = self.members.dead()
        self._note_membership(dead)
        if not dead:
            self.under_replicated = self.lost = 0
            self.cursor, self._sweep = b"", [0, 0]
            return PassStats()
        room = self.max_inflight - len(self.orders)
        if room <= 0:
            return PassStats()
        view = self.members.view()
        records, nxt = self.meta.scan_block_lists(self.cursor, self.scan_batch)
        issued = 0
        for key, blocks in records:
            under = lost = 0
            for blk in blocks:
                bid, holders = blk[0], blk[3]
                if not any(n in dead for n in holders):
                    continue
                under += 1
                lost += all(n in dead for n in holders)
                if bid in self._by_block:
                    continue
                if room <= 0:
                    break
                for r in plan_repairs(view, bid, holders, self.attempts.get(bid, 0)):
                    self._add(Order(bid, r.source, r.target, r.replaces, key, time.monotonic()))
                    room -= 1
                    issued += 1
            else:
                self._sweep[0] += under
                self._sweep[1] += lost
                self.cursor = key
                continue
            break  # out of room: this record is read again (and counted) next pass
        else:
            if nxt is None:  # the sweep is complete
                self.under_replicated, self.lost = self._sweep
                self.cursor, self._sweep = b"", [0, 0]
        return PassStats(ok=issued)

    def status(self) -> dict:
        return {"under_replicated": self.under_replicated, "lost": self.lost, "repairs_in_flight": len(self.orders),
                "dead_nodes": sorted(self._dead), **self.totals}
