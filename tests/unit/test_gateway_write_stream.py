"""gateway/cluster.py Cluster.write_stream: a block that fails to store fails the whole upload with its own error,
even when its store ended before the next block was cut (it used to be dropped from the tasks in flight unread: the
upload went on, returned a block list with a hole in it, and asyncio logged "Task exception was never retrieved")."""
from __future__ import annotations

import asyncio
import gc

import pytest

from epochfs.common import errors
from epochfs.gateway.cluster import Cluster


async def _upload(fail_bid: int | None, abandoned: list[int], nblocks: int = 5):
    c = Cluster("127.0.0.1:9", "s" * 32)
    ids = iter(range(1, 100))

    async def block_size(bucket):
        return 4

    async def allocate(*args):
        return next(ids), (1,), {"1": "127.0.0.1:9"}, 1

    async def put_block(bid, data, crc, nodes, addrs, acks):
        if bid == fail_bid:
            raise errors.Unavailable(f"block {bid}: the node is full")
        await asyncio.sleep(0.05)
        return [1]

    async def abandon(block_ids):
        abandoned.extend(block_ids)

    c.block_size, c._lease, c._allocate, c._put_block, c.abandon = block_size, allocate, allocate, put_block, abandon

    async def stream():
        for _ in range(nblocks):
            yield b"abcd"
            await asyncio.sleep(0.02)  # a failed store ends before the next block is cut

    try:
        return await c.write_stream("bkt", stream(), lambda data: None)
    finally:
        await c.namenode.close()
        await c.peers.close()


def test_every_block_stored_is_returned_in_order():
    abandoned: list[int] = []
    blocks, size = asyncio.run(_upload(None, abandoned))
    assert [b.id for b in blocks] == [1, 2, 3, 4, 5] and size == 20 and abandoned == []


def test_a_block_that_fails_fails_the_upload_with_its_error_and_every_block_is_given_back():
    loop_errors: list[dict] = []
    abandoned: list[int] = []

    async def run():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: loop_errors.append(ctx))
        with pytest.raises(errors.Unavailable, match="block 2: the node is full"):
            await _upload(2, abandoned)
        gc.collect()  # an exception never retrieved is reported when its task is collected
        await asyncio.sleep(0)

    asyncio.run(run())
    assert loop_errors == [] and sorted(abandoned) == [1, 2], "the blocks allocated before the failure was seen"
