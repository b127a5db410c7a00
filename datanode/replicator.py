"""Passive replication: push blocks whose jobs are queued in RocksDB to their secondaries, with retries and backoff."""
from __future__ import annotations

import asyncio
import logging
import time

import anyio

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.peers import Peers
from epochfs.common.worker import PassStats, Worker

from .blockstore import BlockStore


# The in-memory push after a write normally completes within milliseconds; queued jobs wait this long before the
# background pass retries them from disk.
FAST_PATH_GRACE_S = 5.0
LOG_EVERY_S = 30.0

log = logging.getLogger("epochfs.datanode.replicator")


class Replicator(Worker):
    def __init__(self, store: BlockStore, peers: Peers, *, interval_s: float = 0.2, concurrency: int = 4,
                 batch_size: int = 64) -> None:
        self.store, self.peers = store, peers
        self.interval_s, self.concurrency, self.batch_size = interval_s, concurrency, batch_size
        self._tasks: set[asyncio.Future] = set()
        self.refused: set[tuple[int, int]] = set()  # (target, block) jobs whose last push the target refused: full
        self._refusals, self._logged = 0, float("-inf")

    def _outcome(self, target: int, block_id: int, err: errors.DomainError | None) -> None:
        """Note whether a push to `target` was refused for lack of space (counted in `waiting()`, logged at most
        every LOG_EVERY_S); the queued job retries it with backoff either way."""
        if isinstance(err, errors.NodeFull):
            self.refused.add((target, block_id))
            self._refusals += 1
            now = time.monotonic()
            if now - self._logged >= LOG_EVERY_S:
                log.warning("%d replica pushes refused by full nodes (node %s the last); retried with backoff",
                            self._refusals, target)
                self._refusals, self._logged = 0, now
        else:
            self.refused.discard((target, block_id))

    def waiting(self) -> dict:
        """For the heartbeat: queued replication jobs whose target refused the block for lack of space."""
        self.refused &= self.store.queued_jobs()
        return {"no_space": len(self.refused)}

    async def push_now(self, block_id: int, data, crc: int, targets: list[tuple[int, str]]) -> None:
        """Push a block just written (still in memory) to its secondaries; a failure leaves its queued job."""
        done: list[int] = []

        async def one(target: int, addr: str) -> None:
            try:
                await self.peers.get(addr).put_replica(block_id, crc, data, fresh=True)
                done.append(target)
            except errors.DomainError as e:
                self._outcome(target, block_id, e)  # the queued job retries it

        # plain gather: this runs for every block written, and a task group costs more than the two pushes' setup
        await asyncio.gather(*(one(t, addr) for t, addr in targets))
        self.store.complete_many(block_id, done)

    async def push_acked(self, block_id: int, data, crc: int, targets: list[tuple[int, str]], need: int) -> None:
        """Push a block just written to its secondaries and return once `need` of them have it durably (the sync:N
        write policy); raises NotEnoughReplicas when fewer can. The pushes still running after that finish in the
        background; each success completes its queued job, a failure leaves it for the retry pass."""
        async def one(target: int, addr: str) -> bool:
            try:
                await self.peers.get(addr).put_replica(block_id, crc, data, fresh=True)
            except errors.DomainError as e:
                self._outcome(target, block_id, e)
                return False
            self.store.complete(target, block_id)
            return True

        pending = {asyncio.ensure_future(one(t, addr)) for t, addr in targets}
        ok = 0
        while pending and ok < need:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            ok += sum(f.result() for f in done)
        for f in pending:  # keep a reference until they finish
            self._tasks.add(f)
            f.add_done_callback(self._tasks.discard)
        if ok < need:
            raise errors.NotEnoughReplicas(
                f"block {block_id}: only {ok + 1} of the {need + 1} replicas the write policy requires could be "
                f"written ({len(targets) - ok} of {len(targets)} secondaries unreachable or full)")

    async def push_many(self, blocks: list[tuple[int, object, int, list[tuple[int, str]]]], need: int) -> set[int]:
        """Push blocks just written in one batch (id, data, crc, secondaries), one put_replicas call per secondary
        for all its blocks; each copy stored completes its queued job, a failure leaves the job for the retry pass.
        Returns the blocks that fewer than `need` secondaries stored (the sync:N write policy; need 0: async)."""
        by_target: dict[tuple[int, str], list] = {}
        for blk in blocks:
            for target, addr in blk[3]:
                by_target.setdefault((target, addr), []).append(blk)
        copies: dict[int, int] = {}

        async def one(target: int, addr: str, blks: list) -> None:
            heads = [m.ReplicaHead(bid, crc, len(data)) for bid, data, crc, _ in blks]
            try:
                errs = await self.peers.get(addr).put_replicas(heads, [b[1] for b in blks], fresh=True)
            except errors.DomainError as e:
                for bid, *_ in blks:
                    self._outcome(target, bid, e)
                return
            for i, (bid, *_) in enumerate(blks):
                if i in errs:
                    self._outcome(target, bid, errors.by_name(errs[i])(errs[i]))
                else:
                    self.store.complete(target, bid)
                    copies[bid] = copies.get(bid, 0) + 1

        await asyncio.gather(*(one(t, a, blks) for (t, a), blks in by_target.items()))
        return {bid for bid, *_ in blocks if copies.get(bid, 0) < need} if need else set()

    async def run_once(self, *, everything: bool = False) -> PassStats:
        """One pass over the due jobs (every queued job with everything=True, for tests and operators)."""
        stats = PassStats()
        jobs = self.store.due_replications(limit=self.batch_size, now=float("inf") if everything else None)
        limiter = anyio.Semaphore(self.concurrency)

        async def push(target: int, block_id: int, job: dict) -> None:
            async with limiter:
                try:
                    crc, data = self.store.read_raw(block_id)
                except errors.CorruptBlock:
                    self.store.bad.add(block_id)  # reported by the heartbeat; pushed once a good copy is back
                    self.store.backoff(target, block_id, job)
                    stats.failed += 1
                    return
                except errors.NoSuchBlock:
                    if self.store.has(block_id):  # a chunk is missing: as corrupt
                        self.store.bad.add(block_id)
                        self.store.backoff(target, block_id, job)
                        stats.failed += 1
                    else:
                        self.store.complete(target, block_id)  # deleted meanwhile
                    return
                try:
                    await self.peers.get(job["a"]).put_replica(block_id, crc, data, fresh=True)
                    self.store.complete(target, block_id)
                    self._outcome(target, block_id, None)
                    stats.ok += 1
                except errors.DomainError as e:
                    self._outcome(target, block_id, e)
                    self.store.backoff(target, block_id, job)
                    stats.failed += 1

        async with anyio.create_task_group() as tg:
            for target, block_id, job in jobs:
                tg.start_soon(push, target, block_id, job)
        return stats


class CopyOrders:
    """Copies the NameNode orders in heartbeat replies (re-replication, read repair, rebalance): push blocks stored
    here to another node, then report the outcome in the next heartbeat. An order names one target and many blocks
    (small ones travel together): they go in `put_replicas` calls of up to `batch_bytes` each (a block larger than
    that alone), so a node of small samples is restored at a rate set by bytes, not by round trips.

    Orders run in the background (`spawn`), at most `concurrency` at once; a block already being copied to the same
    target is not started twice. Outcomes wait in `copied` ([block, target]) / `failed` ([block, target, error
    class]) until a heartbeat delivers them; `wake` (the heartbeat's) is called when an order is done, so they go at
    once."""

    def __init__(self, store: BlockStore, peers: Peers, spawn, *, concurrency: int = 4, batch_bytes: int = 8 << 20,
                 wake=lambda: None) -> None:
        self.store, self.peers, self.spawn, self.wake = store, peers, spawn, wake
        self.batch_bytes = batch_bytes
        self.limiter = anyio.Semaphore(concurrency)
        self.running: set[tuple[int, int]] = set()
        self.copied: list[list[int]] = []
        self.failed: list[list] = []

    def start(self, orders: list[list]) -> None:
        for target, addr, block_ids in orders:
            target = int(target)
            todo = [b for b in map(int, block_ids) if (b, target) not in self.running]
            if todo:
                self.running.update((b, target) for b in todo)
                self.spawn(self.copy(target, addr, todo))

    async def copy(self, target: int, addr: str, block_ids: list[int]) -> None:
        try:
            async with self.limiter:
                todo = list(reversed(block_ids))
                while todo:
                    heads, bufs, size = [], [], 0
                    while todo:
                        bid = todo[-1]
                        try:
                            crc, data = self.store.read_raw(bid)
                        except errors.DomainError as e:
                            todo.pop()
                            if isinstance(e, (errors.CorruptBlock, errors.NoSuchBlock)) and self.store.has(bid):
                                self.store.bad.add(bid)  # the heartbeat reports it: the NameNode picks another source
                            self.failed.append([bid, target, type(e).__name__])  # planned again from another holder
                            continue
                        n = sum(len(d) for d in data)
                        if heads and size + n > self.batch_bytes:
                            break  # read again for the next call
                        todo.pop()
                        heads.append(m.ReplicaHead(bid, crc, n))
                        bufs += data
                        size += n
                    if heads:
                        await self._send(target, addr, heads, bufs)
        finally:
            self.running.difference_update((b, target) for b in block_ids)
            self.wake()

    async def _send(self, target: int, addr: str, heads: list[m.ReplicaHead], bufs: list) -> None:
        try:
            errs = await self.peers.get(addr).put_replicas(heads, bufs)
        except errors.DomainError as e:
            self.failed += [[h.id, target, type(e).__name__] for h in heads]
            return
        for i, h in enumerate(heads):
            if i in errs:
                self.failed.append([h.id, target, errs[i]])
            else:
                self.copied.append([h.id, target])

    def take_outcomes(self) -> tuple[list[list[int]], list[list]]:
        out = self.copied, self.failed
        self.copied, self.failed = [], []
        return out

    def give_back(self, copied: list[list[int]], failed: list[list]) -> None:
        """Outcomes a heartbeat could not deliver: kept for the next one."""
        self.copied[:0], self.failed[:0] = copied, failed
