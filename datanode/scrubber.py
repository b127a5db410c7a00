"""The scrubber: re-reads every stored chunk at a steady pace, checks its CRC32C, and reports bad blocks.

Disks rot silently; a block nobody reads would otherwise stay corrupt until its other replicas are gone too. Each
pass reads `bytes_per_s * interval_s` bytes of chunks in key order from where the last pass stopped (wrapping around
at the end), so a sweep of the whole node takes about used bytes / `bytes_per_s`. A chunk whose CRC does not match
makes its block bad: it is reported to the NameNode (the same path as the gateway's read repair), which orders a good
holder to re-push it. Reports that could not be delivered are retried on the next pass.
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


class Scrubber(Worker):
    def __init__(self, store: BlockStore, report: Callable[[list[int]], Awaitable[list[int]]], *,
                 bytes_per_s: int, interval_s: float = 1.0) -> None:
        self.store, self.report = store, report
        self.bytes_per_s, self.interval_s = bytes_per_s, interval_s
        self.cursor = keys.CHUNKS
        self.bad: set[int] = set()  # found, not yet reported
        self.totals = {"bytes": 0, "chunks": 0, "corrupt": 0, "sweeps": 0}

    def scan(self, budget: int) -> int:
        """Check chunks from the cursor until `budget` bytes were read (or the end: the next scan starts over).
        Returns the bytes read; adds blocks with bad chunks to `self.bad`."""
        read = 0
        last = None
        for k, v in self.store.kv.scan(self.cursor, prefix_end(keys.CHUNKS)):
            last = k
            mv = memoryview(v)
            read += len(mv)
            self.totals["chunks"] += 1
            if len(mv) < 4 or crc32c(mv[4:]) != int.from_bytes(mv[:4], "big"):
                bid = int.from_bytes(k[1:9], "big")
                if self.store.has(bid):
                    log.warning("scrubber: block %s chunk %s failed its crc32c check", bid,
                                int.from_bytes(k[9:13], "big"))
                    self.bad.add(bid)
                    self.totals["corrupt"] += 1
            if read >= budget:
                break
        else:
            self.cursor = keys.CHUNKS
            self.totals["sweeps"] += 1
            self.totals["bytes"] += read
            return read
        self.cursor = last + b"\0"
        self.totals["bytes"] += read
        return read

    async def run_once(self) -> PassStats:
        if self.bytes_per_s <= 0:
            return PassStats()
        self.scan(max(1, int(self.bytes_per_s * self.interval_s)))
        if self.bad:
            for bid in await self.report(sorted(self.bad)):
                self.bad.discard(bid)
        # paced: never "go again at once" (ok stays 0), the next pass comes after interval_s
        return PassStats(extra=dict(self.totals))
