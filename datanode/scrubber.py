"""The scrubber: re-reads every stored chunk at a steady pace, checks its CRC32C, and reports bad blocks.

Disks rot silently; a block nobody reads would otherwise stay corrupt until its other replicas are gone too. Each
pass reads `bytes_per_s * interval_s` bytes of chunks in key order from where the last pass stopped (wrapping around
at the end), so a sweep of the whole node takes about used bytes / `bytes_per_s`. A chunk whose CRC does not match
makes its block bad: it is reported to the NameNode (the same path as the gateway's read repair), which orders a good
holder to re-push it. Reports that could not be delivered are retried on the next pass.

A scrub job (the NameNode's heartbeat reply names it) starts a full pass from the first chunk at once, even when
background scrubbing is off (then at JOB_BYTES_PER_S); its progress goes back in the heartbeats until it is done.
"""
from __future__ import annotations

import logging
from typing import Awaitable, Callable

from epochfs.common.blocks import crc32c
from epochfs.common.kv import prefix_end
from epochfs.common.worker import PassStats, Worker

from . import keys
from .blockstore import BlockStore

log = logging.getLogger("epochfs.datanode.scrubber")
JOB_BYTES_PER_S = 4 << 20  # the pace of a scrub job's pass when background scrubbing is off
# What one chunk costs against the pace at least: a tiny chunk's read is mostly fixed per-key cost, and charging only
# its bytes made a node of 10k tiny objects rescan all of them every second (22 ms of CPU per second while idle).
MIN_CHUNK_COST = 16 << 10


class Scrubber(Worker):
    def __init__(self, store: BlockStore, report: Callable[[list[int]], Awaitable[list[int]]], *,
                 bytes_per_s: int, interval_s: float = 1.0) -> None:
        self.store, self.report = store, report
        self.bytes_per_s, self.interval_s = bytes_per_s, interval_s
        self.space = 0  # 0: chunks in the store's main key space, 1: in its bulk space
        self.cursor = keys.CHUNKS
        self.bad: set[int] = set()  # found, not yet reported
        self.totals = {"bytes": 0, "chunks": 0, "corrupt": 0, "sweeps": 0}
        self.job: dict | None = None  # the scrub job's pass: {job, bytes, total, blocks, bad, done}

    def start_job(self, job_id: str) -> None:
        """Start a full pass for scrub job `job_id` now, from the first chunk (unless it is the current one)."""
        if self.job is not None and self.job["job"] == job_id:
            return
        log.warning("scrub job %s: full pass started", job_id)
        self.space, self.cursor = 0, keys.CHUNKS
        self.job = {"job": job_id, "bytes": 0, "total": self.store.used, "blocks": 0, "bad": 0, "done": False}

    def _count(self, key: str, n: int) -> None:
        if self.job is not None and not self.job["done"]:
            self.job[key] += n

    def scan(self, budget: int) -> int:
        """Check chunks from the cursor until `budget` bytes were read, each chunk counting at least MIN_CHUNK_COST
        (or the end: the next scan starts over).
        Returns the bytes read; adds blocks with bad chunks to `self.bad`."""
        spaces = [self.store.kv] + ([self.store.bulk] if self.store.bulk is not None else [])
        read = cost = 0
        while self.space < len(spaces):
            for k, v in spaces[self.space].scan(self.cursor, prefix_end(keys.CHUNKS)):
                mv = memoryview(v)
                read += len(mv)
                cost += max(len(mv), MIN_CHUNK_COST)
                self.totals["chunks"] += 1
                self._count("blocks", k[9:13] == b"\0\0\0\0")
                if len(mv) < 4 or crc32c(mv[4:]) != int.from_bytes(mv[:4], "big"):
                    bid = int.from_bytes(k[1:9], "big")
                    if self.store.has(bid):
                        log.warning("scrubber: block %s chunk %s failed its crc32c check", bid,
                                    int.from_bytes(k[9:13], "big"))
                        self._count("bad", bid not in self.bad)  # bad blocks, not chunks
                        self.bad.add(bid)
                        self.totals["corrupt"] += 1
                if cost >= budget:
                    self.cursor = k + b"\0"
                    self.totals["bytes"] += read
                    self._count("bytes", read)
                    return read
            self.space, self.cursor = self.space + 1, keys.CHUNKS
        self.space = 0
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
        if self.bad:
            for bid in await self.report(sorted(self.bad)):
                self.bad.discard(bid)
        # paced: never "go again at once" (ok stays 0), the next pass comes after interval_s
        return PassStats(extra=dict(self.totals))
