"""A large file read front to back passes through its handle's window, not the block cache's memory: every chunk is
fetched once even when the kernel's concurrent reads are served out of order, and the window stays small."""
import random

import trio

from epochfs.frontends.fuse.inodes import InodeTable
from epochfs.frontends.fuse.options import MountOptions
from epochfs.frontends.fuse.reader import Handle, Reader

CHUNK = 1 << 20
SIZE = 24 * CHUNK + 12345
BODY = random.Random(1).randbytes(SIZE)


class Counted(Reader):
    """The mount's read path over an in-memory file instead of the DataNodes, counting chunk fetches."""

    def __init__(self) -> None:
        opts = MountOptions(chunk_size=CHUNK, readahead=2, cache_mem=64 << 20)
        super().__init__(client=None, opts=opts, inodes=InodeTable(None, opts))
        self.fetched: list[int] = []
        self.h = Handle(ino=5, etag="e", size=SIZE)

    async def _read(self, ino: int, etag: str, off: int, n: int, size: int) -> bytes:
        self.fetched.append(off // CHUNK)
        await trio.sleep(random.random() / 1000)
        return BODY[off:off + n]


def run(ops: Counted, batches: list[list[tuple[int, int]]]) -> list[int]:
    """Serve each batch's reads concurrently (started in the order given), as FUSE does the kernel's readahead;
    returns the window's size after each batch."""
    sizes = []

    async def read(off: int, n: int) -> None:
        assert await ops.read(ops.h, off, n) == BODY[off:off + n]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            for batch in batches:
                async with trio.open_nursery() as n:
                    for off, size in batch:
                        n.start_soon(read, off, size)
                sizes.append(len(ops.h.window))
            nursery.cancel_scope.cancel()

    trio.run(main)
    return sizes


def test_a_stream_fetches_each_chunk_once_and_keeps_only_its_window():
    rng = random.Random(2)
    ops = Counted()
    step = 384 << 10  # reads straddle chunk boundaries, as the kernel's do after a small first read
    offs = list(range(0, SIZE, step))
    batches = [[(o, min(step, SIZE - o)) for o in offs[i:i + 4]] for i in range(0, len(offs), 4)]
    for b in batches[1:]:
        rng.shuffle(b)
    sizes = run(ops, batches)
    assert sorted(ops.fetched) == list(range(25))  # every chunk once, readahead included
    assert max(sizes) <= 2 * 3 + 1
    assert ops.cache._mem.used <= 2 * CHUNK  # at most the chunks read before the stream was seen


def test_reads_at_random_offsets_are_kept_in_the_block_cache():
    ops = Counted()
    order = [20, 3, 11, 0, 16, 7, 23]  # no read within the readahead span of the one before
    run(ops, [[(i * CHUNK, 4096)] for i in order])
    assert sorted(ops.fetched) == sorted(order)
    assert ops.cache._mem.used == len(order) * CHUNK
    run(ops, [[(i * CHUNK + 5, 4096)] for i in order])
    assert len(ops.fetched) == len(order)  # all from the cache
