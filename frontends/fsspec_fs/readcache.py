"""The read cache of an `epochfs://` file opened for reading: a few aligned blocks, least recently used out first.

fsspec's default ("readahead") keeps one range: a reader that jumps back and forth refetches, and every fetch reads
a block size past its end. A zip archive read as torch.load reads one (its first bytes, its central directory at the
end, then the records from the start: DCP's FsspecReader does that once per tensor) fetched about 3.4 times its size
that way. Here a read fetches only the blocks it misses, each run of missing blocks in one request (PinnedReader
reads its pieces from the DataNodes at once), and keeps the last `maxblocks` of them. A read larger than the cache
goes straight through in one request; a read that continues the previous miss also fetches the block after it.
"""
from __future__ import annotations

from collections import OrderedDict

from fsspec.caching import BaseCache, register_cache


class BlockLRU(BaseCache):
    name = "epochfs"

    def __init__(self, blocksize: int, fetcher, size: int, maxblocks: int = 8) -> None:
        super().__init__(blocksize, fetcher, size)
        self.maxblocks = max(2, maxblocks)
        self.blocks: OrderedDict[int, memoryview] = OrderedDict()
        self._next = -1  # the block after the last one fetched: a miss there is a sequential reader

    def _fetch(self, start: int | None, stop: int | None) -> bytes:
        start = 0 if start is None else start
        stop = self.size if stop is None else min(stop, self.size)
        if start >= stop:
            return b""
        bs = self.blocksize
        first, last = start // bs, (stop - 1) // bs
        if last - first + 1 > self.maxblocks:  # more than the cache holds: one request, nothing kept
            self.miss_count += 1
            self.total_requested_bytes += stop - start
            return self.fetcher(start, stop)
        b = first
        while b <= last:
            if b in self.blocks:
                self.blocks.move_to_end(b)
                self.hit_count += 1
                b += 1
                continue
            end = b
            while end < last and end + 1 not in self.blocks:
                end += 1
            if b == self._next and end == last and (end + 1) * bs < self.size and end - first + 2 <= self.maxblocks:
                end += 1  # reading on from the last fetch: the next block too, in the same request
            data = memoryview(self.fetcher(b * bs, min((end + 1) * bs, self.size)))
            self.miss_count += 1
            self.total_requested_bytes += len(data)
            for i in range(b, end + 1):
                self.blocks[i] = data[(i - b) * bs:(i - b + 1) * bs]
            self._next = end + 1
            b = end + 1
        pieces = [self.blocks[i] for i in range(first, last + 1)]
        while len(self.blocks) > self.maxblocks:
            self.blocks.popitem(last=False)
        lo, hi = start - first * bs, stop - last * bs
        if len(pieces) == 1:
            return bytes(pieces[0][lo:hi])
        return b"".join([pieces[0][lo:], *pieces[1:-1], pieces[-1][:hi]])


register_cache(BlockLRU, clobber=True)
