"""Passive replication: push blocks whose jobs are queued in RocksDB to their secondaries, with retries and backoff."""
from __future__ import annotations

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

    async def push_now(self, block_id: int, data, crc: int, targets: list[tuple[int, str]]) -> None:
        """Push a block just written (still in memory) to its secondaries; a failure leaves its queued job."""
        done: list[int] = []

        async def one(target: int, addr: str) -> None:
            try:
                await self.peers.get(addr).call("put_replica", data, block_id=block_id, crc=crc)
                done.append(target)
            except errors.DomainError:
                pass  # the queued job retries it

        async with anyio.create_task_group() as tg:
            for target, addr in targets:
                tg.start_soon(one, target, addr)
        self.store.complete_many(block_id, done)

    async def run_once(self, *, everything: bool = False) -> PassStats:
        """One pass over the due jobs (every queued job with everything=True, for tests and operators)."""
        stats = PassStats()
        jobs = self.store.due_replications(limit=self.batch_size, now=float("inf") if everything else None)
        limiter = anyio.Semaphore(self.concurrency)

        async def push(target: int, block_id: int, job: dict) -> None:
            async with limiter:
                try:
                    crc, data = self.store.read_raw(block_id)
                except errors.NoSuchBlock:
                    self.store.complete(target, block_id)  # deleted meanwhile
                    return
                try:
                    await self.peers.get(job["a"]).call("put_replica", data, block_id=block_id, crc=crc)
                    self.store.complete(target, block_id)
                    stats.ok += 1
                except errors.DomainError:
                    self.store.backoff(target, block_id, job)
                    stats.failed += 1

        async with anyio.create_task_group() as tg:
            for target, block_id, job in jobs:
                tg.start_soon(push, target, block_id, job)
        return stats
