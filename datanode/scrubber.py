"""The scrubber: re-reads every stored block at a steady pace, checks the CRC32C of each of its chunks, and has bad
ones reported.

Disks rot silently; a block nobody reads would otherwise stay corrupt until its other replicas are gone too. Each
pass reads `bytes_per_s * interval_s` bytes of blocks in block-id order from where the last pass stopped (wrapping
around at the end), so a sweep of the whole node takes about used bytes / `bytes_per_s`. The blocks come from the
block index and each is read by key, as any read is (BlockStore.read): a copy that fails -- a chunk's CRC, a missing
chunk, or the storage engine unable to read it (RocksDB's own block checksum) -- is counted, noted in the store's
`bad` set, which the heartbeat reports to the NameNode (the path of the gateway's read repair: a good holder
re-pushes it), and the pass goes on with the next block. (Iterating over the chunks themselves stopped at the first
damaged RocksDB block as if the store ended there.)

A scrub job (the NameNode's heartbeat reply names it) starts a full pass from the first block at once, even when
background scrubbing is off (then at JOB_BYTES_PER_S); its progress goes back in the heartbeats until it is done.
"""
from __future__ import annotations

import logging

from epochfs.common import errors
from epochfs.common.worker import PassStats, Worker

from .blockstore import BlockStore

log = logging.getLogger("epochfs.datanode.scrubber")
JOB_BYTES_PER_S = 4 << 20  # the pace of a scrub job's pass when background scrubbing is off
# What one block costs against the pace at least: a tiny block's read is mostly fixed per-key cost, and charging only
# its bytes made a node of 10k tiny objects rescan all of them every second (22 ms of CPU per second while idle).
MIN_BLOCK_COST = 16 << 10


class Scrubber(Worker):
    def __init__(self, store: BlockStore, *, bytes_per_s: int, interval_s: float = 1.0) -> None:
        self.store = store
        self.bytes_per_s, self.interval_s = bytes_per_s, interval_s
        self.cursor = 0  # the next block id to check
        self.totals = {"bytes": 0, "blocks": 0, "corrupt": 0, "sweeps": 0}
        self.job: dict | None = None  # the scrub job's pass: {job, bytes, total, blocks, bad, done}

    def start_job(self, job_id: str) -> None:
        """Start a full pass for scrub job `job_id` now, from the first block (unless it is the current one)."""
        if self.job is not None and self.job["job"] == job_id:
            return
        log.warning("scrub job %s: full pass started", job_id)
        self.cursor = 0
        self.job = {"job": job_id, "bytes": 0, "total": self.store.used, "blocks": 0, "bad": 0, "done": False}

    def _count(self, key: str, n: int) -> None:
        if self.job is not None and not self.job["done"]:
            self.job[key] += n

    def _check(self, bid: int) -> int:
        """Read and check every chunk of block `bid`; returns its size (0 if it was deleted meanwhile). A bad copy
        is counted and noted in the store's `bad` set for the heartbeat to report. A ZEROED block has no bytes to
        read (its meta, the one thing stored, RocksDB checks as it reads it): 0."""
        if self.store.zeroed(bid):
            return 0
        try:
            return sum(len(b) for b in self.store.read(bid))
        except errors.NoSuchBlock:
            if not self.store.has(bid):
                return 0  # deleted meanwhile
            err: Exception = errors.NoSuchBlock(f"block {bid} is missing a chunk")
        except errors.CorruptBlock as e:
            err = e
        log.warning("scrubber: %s", err)
        self.store.bad.add(bid)
        self.totals["corrupt"] += 1
        self._count("bad", 1)
        return self.store.size(bid)

    def scan(self, budget: int) -> int:
        """Check blocks from the cursor until `budget` bytes were read, each block counting at least MIN_BLOCK_COST
        (or the end: the next scan starts over). Returns the bytes read; bad blocks go to the store's `bad` set."""
        read = cost = 0
        for bid in self.store.blocks_from(self.cursor):
            n = self._check(bid)
            read += n
            cost += max(n, MIN_BLOCK_COST)
            self.totals["blocks"] += 1
            self._count("blocks", 1)
            if cost >= budget:
                self.cursor = bid + 1
                self.totals["bytes"] += read
                self._count("bytes", read)
                return read
        self.cursor = 0
        self.totals["sweeps"] += 1
        self.totals["bytes"] += read
        self._count("bytes", read)
        if self.job is not None and not self.job["done"]:
            self.job["done"] = True
            log.warning("scrub job %s: pass done, %d blocks checked, %d bad", self.job["job"], self.job["blocks"],
                        self.job["bad"])
        return read

    async def run_once(self) -> PassStats:
        pace = self.bytes_per_s
        if pace <= 0:
            if self.job is None or self.job["done"]:
                return PassStats()
            pace = JOB_BYTES_PER_S
        self.scan(max(1, int(pace * self.interval_s)))
        # paced: never "go again at once" (ok stays 0), the next pass comes after interval_s
        return PassStats(extra=dict(self.totals))
