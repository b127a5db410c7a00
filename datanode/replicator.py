"""Passive replication: push blocks whose jobs are queued in RocksDB to their secondaries, with retries and backoff."""
from __future__ import annotations

import asyncio

import anyio

from epochfs.common import errors
from epochfs.common.peers import Peers
from epochfs.common.worker import PassStats, Worker

from .blockstore import BlockStore


# The in-memory push after a write normally completes within milliseconds; queued jobs wait this long before the
# background pass retries them from disk.
FAST_PATH_GRACE_S = 5.0


class Replicator(Worker):
    def __init__(self, store: BlockStore, peers: Peers, *, interval_s: float = 0.2, concurrency: int = 4,
                 batch_size: int = 64) -> None:
        self.store, self.peers = store, peers
        self.interval_s, self.concurrency, self.batch_size = interval_s, concurrency, batch_size
        self._tasks: set[asyncio.Future] = set()

    async def push_now(self, block_id: int, data, crc: int, targets: list[tuple[int, str]]) -> None:
        """Push a block just written (still in memory) to its secondaries; a failure leaves its queued job."""
        done: list[int] = []

        async def one(target: int, addr: str) -> None:
            try:
                await self.peers.get(addr).call("put_replica", data, block_id=block_id, crc=crc, fresh=True)
                done.append(target)
            except errors.DomainError:
                pass  # the queued job retries it

        # plain gather: this runs for every block written, and a task group costs more than the two pushes' setup
        await asyncio.gather(*(one(t, addr) for t, addr in targets))
        self.store.complete_many(block_id, done)

    async def push_acked(self, block_id: int, data, crc: int, targets: list[tuple[int, str]], need: int) -> None:
        """Push a block just written to its secondaries and return once `need` of them have it durably (the sync:N
        write policy); raises NotEnoughReplicas when fewer can. The pushes still running after that finish in the
        background; each success completes its queued job, a failure leaves it for the retry pass."""
        async def one(target: int, addr: str) -> bool:
            try:
                await self.peers.get(addr).call("put_replica", data, block_id=block_id, crc=crc, fresh=True)
            except errors.DomainError:
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
                    await self.peers.get(job["a"]).call("put_replica", data, block_id=block_id, crc=crc, fresh=True)
                    self.store.complete(target, block_id)
                    stats.ok += 1
                except errors.DomainError:
                    self.store.backoff(target, block_id, job)
                    stats.failed += 1

        async with anyio.create_task_group() as tg:
            for target, block_id, job in jobs:
                tg.start_soon(push, target, block_id, job)
        return stats


class CopyOrders:
    """Copies the NameNode orders in heartbeat replies (re-replication, read repair): push a block stored here to
    another node with the same `put_replica` as passive replication, then report the outcome in the next heartbeat.

    Orders run in the background (`spawn`), at most `concurrency` at once; an order already running is not started
    twice. Outcomes wait in `copied` / `failed` ([block, target] pairs) until a heartbeat delivers them."""

    def __init__(self, store: BlockStore, peers: Peers, spawn, *, concurrency: int = 4) -> None:
        self.store, self.peers, self.spawn = store, peers, spawn
        self.limiter = anyio.Semaphore(concurrency)
        self.running: set[tuple[int, int]] = set()
        self.copied: list[list[int]] = []
        self.failed: list[list[int]] = []

    def start(self, orders: list[list]) -> None:
        for bid, target, addr in orders:
            key = (int(bid), int(target))
            if key not in self.running:
                self.running.add(key)
                self.spawn(self.copy(key[0], key[1], addr))

    async def copy(self, block_id: int, target: int, addr: str) -> bool:
        try:
            async with self.limiter:
                try:
                    crc, data = self.store.read_raw(block_id)
                except (errors.CorruptBlock, errors.NoSuchBlock):
                    if self.store.has(block_id):
                        self.store.bad.add(block_id)  # the heartbeat reports it: the NameNode picks another source
                    raise
                await self.peers.get(addr).call("put_replica", data, block_id=block_id, crc=crc)
            self.copied.append([block_id, target])
            return True
        except errors.DomainError:
            self.failed.append([block_id, target])  # the NameNode plans it again, maybe from another holder
            return False
        finally:
            self.running.discard((block_id, target))

    def take_outcomes(self) -> tuple[list[list[int]], list[list[int]]]:
        out = self.copied, self.failed
        self.copied, self.failed = [], []
        return out

    def give_back(self, copied: list[list[int]], failed: list[list[int]]) -> None:
        """Outcomes a heartbeat could not deliver: kept for the next one."""
        self.copied[:0], self.failed[:0] = copied, failed
