"""The read cache of an `epochfs://` file opened for reading: a few aligned blocks, least recently used out first,
and the next blocks read in the background while a reader moves forward.

fsspec's default ("readahead") keeps one range: a reader that jumps back and forth refetches, and every fetch reads
a block size past its end. A zip archive read as torch.load reads one (its first bytes, its central directory at the
end, then the records from the start: DCP's FsspecReader does that once per tensor) fetched about 3.4 times its size
that way. Here a read fetches only the blocks it misses, each run of missing blocks in one request (PinnedReader
reads its pieces from the DataNodes at once), and keeps the last `maxblocks` of them. A read larger than the cache
goes straight through in one request.

Given `ahead` (a fetch started in the background), a read at the front of what was read so far (the reader moves
forward: a sequential read, the tensors of a DCP file one after the other) starts the fetch of the `prefetch` blocks
after it, so the network and the DataNodes work while the reader uses what it has; without it, a read that
continues the previous miss fetches the block after it in the same request. Given `buffers` (the bytes as the
DataNodes sent them, a list of buffers), blocks are kept as views of those, never joined: `readinto` copies once,
from them into the reader's buffer (torch.load reads a tensor's bytes that way).
"""
from __future__ import annotations

import os
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable

from fsspec.caching import BaseCache, register_cache

Buffers = list  # of bytes-like objects, in order


class BlockLRU(BaseCache):
    name = "epochfs"

    def __init__(self, blocksize: int, fetcher, size: int, maxblocks: int = 8,
                 buffers: Callable[[int, int], Buffers] | None = None,
                 ahead: Callable[[int, int], Future] | None = None, prefetch: int = 2) -> None:
        super().__init__(blocksize, fetcher, size)
        self.maxblocks = max(2, maxblocks)
        self.prefetch = max(1, min(prefetch, self.maxblocks // 2))
        self.blocks: OrderedDict[int, list[memoryview]] = OrderedDict()
        self._buffers = buffers or (lambda start, stop: [fetcher(start, stop)])
        self._ahead = ahead
        self._flight: tuple[int, int, Future] | None = None  # blocks [first, last] being fetched in the background
        self._flight_pid = 0  # the process that started it: a forked child's copy of it is never answered
        self._next = -1  # the block after the last one fetched: a miss there is a sequential reader
        self._front = -1  # the furthest block read so far

    def _fetch(self, start: int | None, stop: int | None) -> bytes:
        views = self._views(start, stop)
        return bytes(views[0]) if len(views) == 1 else b"".join(views)

    def readinto(self, start: int, out: memoryview) -> int:
        """Fill `out` (a byte view) with the bytes from `start` on; the number of bytes put (less at the end)."""
        pos = 0
        for v in self._views(start, start + len(out)):
            out[pos:pos + len(v)] = v
            pos += len(v)
        return pos

    def close(self) -> None:
        if self._flight is not None:
            self._flight[2].cancel()
            self._flight = None
        self.blocks.clear()

    def _views(self, start: int | None, stop: int | None) -> list[memoryview]:
        start = 0 if start is None else start
        stop = self.size if stop is None else min(stop, self.size)
        if start >= stop:
            return []
        bs = self.blocksize
        first, last = start // bs, (stop - 1) // bs
        if last - first + 1 > self.maxblocks:  # more than the cache holds: one request, nothing kept
            self.miss_count += 1
            self.total_requested_bytes += stop - start
            return [memoryview(b) for b in self._buffers(start, stop)]
        b = first
        while b <= last:
            if b in self.blocks:
                self.blocks.move_to_end(b)
                self.hit_count += 1
                b += 1
                continue
            if self._flying(b):
                self._land()
                continue
            end = b
            while end < last and end + 1 not in self.blocks and not self._flying(end + 1):
                end += 1
            if (self._ahead is None and b == self._next and end == last and (end + 1) * bs < self.size
                    and end - first + 2 <= self.maxblocks):
                end += 1  # reading on from the last fetch: the next block too, in the same request
            self._keep(b, self._buffers(b * bs, min((end + 1) * bs, self.size)))
            self.miss_count += 1
            self.total_requested_bytes += min((end + 1) * bs, self.size) - b * bs
            self._next = end + 1
            b = end + 1
        views = []
        for i in range(first, last + 1):
            lo = start - i * bs if i == first else 0
            hi = stop - i * bs if i == last else bs
            views.extend(_within(self.blocks[i], lo, hi))
        if first <= self._front + 1 and last >= self._front:  # at the front, or just past it
            self._read_ahead(last)
        self._front = max(self._front, last)
        while len(self.blocks) > self.maxblocks:
            self.blocks.popitem(last=False)
        return views

    def _flying(self, b: int) -> bool:
        return self._flight is not None and self._flight[0] <= b <= self._flight[1]

    def _land(self) -> None:
        """Keep what the background fetch brought (a failed one leaves its blocks to be fetched again, in the
        reader's own request: its error comes out there)."""
        first, _, fut = self._flight
        self._flight = None
        if self._flight_pid != os.getpid():
            return
        try:
            got = fut.result()
        except Exception:
            return
        self._keep(first, got)

    def _read_ahead(self, last: int) -> None:
        if self._ahead is None or self._flight is not None:
            return
        a = last + 1
        while a in self.blocks:
            a += 1
        z = min(a + self.prefetch - 1, (self.size - 1) // self.blocksize)
        if a > z:
            return
        self._flight = (a, z, self._ahead(a * self.blocksize, min((z + 1) * self.blocksize, self.size)))
        self._flight_pid = os.getpid()
        self.total_requested_bytes += min((z + 1) * self.blocksize, self.size) - a * self.blocksize

    def _keep(self, b: int, bufs: Buffers) -> None:
        """Cut the buffers that hold the bytes from block `b` on into blocks (views, no copy)."""
        bs, parts, have = self.blocksize, [], 0
        for buf in bufs:
            v = memoryview(buf)
            off = 0
            while off < len(v):
                take = v[off:off + min(bs, self.size - b * bs) - have]
                parts.append(take)
                have += len(take)
                off += len(take)
                if have == min(bs, self.size - b * bs):
                    self.blocks[b] = parts
                    self.blocks.move_to_end(b)
                    b, parts, have = b + 1, [], 0
        if parts:  # a short answer (the object ended early): not a whole block, not kept
            raise OSError(f"read ended {have} bytes into block {b}")


def _within(parts: list[memoryview], lo: int, hi: int) -> list[memoryview]:
    """The views of bytes [lo, hi) of a block kept as `parts`."""
    out, pos = [], 0
    for p in parts:
        a, z = max(lo - pos, 0), min(hi - pos, len(p))
        if a < z:
            out.append(p[a:z])
        pos += len(p)
        if pos >= hi:
            break
    return out


register_cache(BlockLRU, clobber=True)
