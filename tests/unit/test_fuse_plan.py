"""The mount's locate plans: one locate at a time per file, whatever the number of readers waiting for it."""
import time

import trio

from epochfs.common.messages import FileLocated, LocatedPiece, ReadGrant
from epochfs.frontends.fuse.inodes import InodeTable
from epochfs.frontends.fuse.options import MountOptions
from epochfs.frontends.fuse.reader import LOCATE_SPAN, Reader

SIZE = 3 * LOCATE_SPAN
BLOCK = 4 << 20


class SlowLocates:
    """A gateway whose locate answers, after a while, for LOCATE_SPAN bytes from the offset asked."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.running = 0

    async def fs_locate(self, bucket: str, ino: int, off: int, span: int) -> FileLocated:
        self.calls.append(off)
        self.running += 1
        assert self.running == 1, "two locates of one file at once"
        await trio.sleep(0.01)
        self.running -= 1
        start = off - off % BLOCK
        pieces = [LocatedPiece(id=b // BLOCK, offset=0, length=BLOCK, nodes=(1,))
                  for b in range(start, min(off + span, SIZE), BLOCK)]
        return FileLocated(etag='"e"', size=SIZE, pieces=pieces, addrs={"1": "127.0.0.1:1"},
                           grant=ReadGrant(blocks=[], exp=int(time.time() + 60), tok=""))


def test_readers_waiting_for_one_locate_of_a_file_each_get_a_plan_for_their_bytes():
    c = SlowLocates()
    ops = Reader(c, MountOptions(), InodeTable(c, MountOptions()))
    got: dict[int, object] = {}

    async def reader(off: int) -> None:
        got[off] = await ops._plan("b", 7, "e", off, off + (1 << 20), SIZE)

    async def main() -> None:
        async with trio.open_nursery() as n:
            # one reader in span 0 locates first; three in span 1 and three in span 2 wait for it, and then for
            # each other: before the fix, two of them woke together and the second's cleanup raised KeyError
            for off in [0] + [LOCATE_SPAN + i * BLOCK for i in range(3)] + [2 * LOCATE_SPAN + i * BLOCK
                                                                            for i in range(3)]:
                n.start_soon(reader, off)

    trio.run(main)
    assert ops.locating == {}
    for off, plan in got.items():
        assert plan is not None and plan.covers("e", off, off + (1 << 20)), off
    assert len(c.calls) <= 7
