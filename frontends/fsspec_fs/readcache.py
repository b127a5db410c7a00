"""The read cache of an `epochfs://` file opened for reading: a few aligned blocks, least recently used out first,
and the next blocks read in the background while a reader moves forward.

fsspec's default ("readahead") keeps one range: a reader that jumps back and forth refetches, and every fetch reads
a block size past its end. A zip archive read as torch.load reads one (its first bytes, its central directory at the
end, then the records from the start: DCP's FsspecReader does that once per tensor) fetched about 3.4 times its size
that way. Here a read fetches only the blocks it misses, each run of missing blocks in one request (PinnedReader
reads its pieces from the DataNodes at once), and keeps the last `maxblocks` of them. A read larger than the cache
goes straight through in one request.

Given `ahead` (a fetch started in the background), a read that goes forward (at the front of what was read so far,
or on from where one of the last few reads ended: see `_onward`) starts the fetch of the blocks after it, twice as
many as it read (or as `prefetch`), so the network and the DataNodes work while the reader uses what it has; the
blocks such a reader read whole are the first to go when the cache is full. Without `ahead`, a read that
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
SEQUENTIAL_RUNS = 4  # readers going forward in this many places of a file at once are each read ahead (_onward)
SKIP_AHEAD = 2  # ... also when they skip up to this many blocks


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
        self._ends: list[int] = []  # where the last few reads that went forward ended (their last block + 1)
        # blocks read to their end going forward: evicted first, and not read ahead again once gone (until a read
        # needs one of those again: then the reader is not what this took it for, and they are all forgotten)
        self._done: set[int] = set()

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
        self._done.clear()

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
                self._done.discard(b)
                self.hit_count += 1
                b += 1
                continue
            if self._flying(b):
                self._land()
                continue
            if b in self._done:
                self._done.clear()
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
        if self._onward(first, last) or first <= self._front + 1 and last >= self._front:  # (or at the front)
            # going forward: the blocks it read whole are likely done with, so they go first, before the
            # blocks fetched ahead and those read in other places (DCP's small tensors, read again and again)
            self._done.update(range(first if start % bs == 0 else first + 1, last + 1 if stop % bs == 0 else last))
            # twice as far ahead as the read was long (DCP reads 8 MiB tensors), or as `prefetch` blocks
            self._read_ahead(last, min(2 * max(self.prefetch, last - first + 1), self.maxblocks // 2))
        self._front = max(self._front, last)
        while len(self.blocks) > self.maxblocks:
            b = next((b for b in self.blocks if b in self._done), None)  # the least recently used of those
            if b is None:
                self.blocks.popitem(last=False)
            else:
                del self.blocks[b]
        return views

    def _onward(self, first: int, last: int) -> bool:
        """Whether a read of blocks [first, last] goes on past where one of the last SEQUENTIAL_RUNS reads ended
        (it starts in that read's last block or the next one, and reaches a block after it), noting where it ends.

        A reader can go forward in several places at once: DCP's FsspecReader reads a file's tensors in its plan's
        order, not the file's (the 8 MiB weights front to back, the small biases and norms of each layer between
        them, from the file's end), so the furthest block read is the end at once and no read after it is at the
        front; each run still counts here. Before, no read after the first was read ahead: a DCP load of 256 MiB
        made 118 fetches of its own (1.12x the bytes), now about 45 and 35 in the background (1.2x). The same load in
        one process, this cache and the one before alternating 8 times each (a /tmp script): median ~726 against
        ~622 MiB/s (517-851 against 532-677), with OMP_WAIT_POLICY=passive ~800 against ~680 (412-1,000 against
        378-782); under load from another job 250-609 against 239-556 (on 2 cores torch's OpenMP worker spin-waits
        after every copy_ on the core the fetches need)."""
        for i, end in enumerate(self._ends):
            if end - 1 <= first <= end + SKIP_AHEAD:
                if last < end:
                    return False  # still in the block that read ended in
                del self._ends[i]
                self._ends.append(last + 1)
                return True
        self._ends.append(last + 1)
        if len(self._ends) > SEQUENTIAL_RUNS:
            del self._ends[0]
        return False

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

    def _read_ahead(self, last: int, n: int) -> None:
        """Start fetching the next `n` blocks after `last` in the background, those not kept already (a window
        that moves with the reader, not past it)."""
        if self._flight is not None and self._flight[2].done():
            self._land()  # a fetch that came in while the reader was elsewhere: kept, and the next one may start
        if self._ahead is None or self._flight is not None:
            return
        a, z = last + 1, min(last + n, (self.size - 1) // self.blocksize)
        while a <= z and (a in self.blocks or a in self._done):
            a += 1
        while z >= a and (z in self.blocks or z in self._done):
            z -= 1
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
                    self._done.discard(b)
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
