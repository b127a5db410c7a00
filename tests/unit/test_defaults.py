"""common/defaults.py: block-size bounds, the settings that take their defaults from it, and the gateway's view of a
bucket's block size (what the NameNode said last, in bucket info or an allocate reply)."""
from __future__ import annotations

import asyncio
import time

import pydantic
import pytest

from epochfs.common import defaults, errors, rpc
from epochfs.common import messages as m
from epochfs.common.blocks import DEFAULT_BLOCK_SIZE
from epochfs.common.client import MIN_PART
from epochfs.common.messages import op_name
from epochfs.datanode.config import DataNodeSettings
from epochfs.gateway import cluster as gw_cluster
from epochfs.gateway.admin.models import BucketCreate, BucketPatch
from epochfs.gateway.config import GatewaySettings
from epochfs.namenode.config import NameNodeSettings

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.parametrize("n", [64 * KiB, 128 * KiB, 192 * KiB, MiB, 4 * MiB, 32 * MiB])
def test_valid_block_sizes(n):
    assert defaults.check_block_size(n) == n
    assert defaults.parse_block_size(f" {n} ") == n


@pytest.mark.parametrize("n", [0, -64 * KiB, 1, 4096, 63 * KiB, 64 * KiB + 1, MiB + 512, 32 * MiB + 64 * KiB,
                               64 * MiB, 1 << 40, True, 1.0 * MiB, "1048576", None])
def test_invalid_block_sizes(n):
    with pytest.raises(errors.InvalidInput, match="block size"):
        defaults.check_block_size(n)


@pytest.mark.parametrize("text", ["", " ", "1M", "1MiB", "-1048576", "+1048576", "1e6", "0x100000", "1048576.0",
                                  "1_048_576", "１０４８５７６", "9" * 30, "1048575"])
def test_invalid_block_size_headers(text):
    with pytest.raises(errors.InvalidInput, match="block size"):
        defaults.parse_block_size(text)


def test_the_largest_block_fits_an_rpc_frame_with_margin():
    """A block is one RPC payload (put, replication push): the largest valid one must pass every server's bound."""
    for payload in (rpc.DEFAULT_MAX_PAYLOAD, NameNodeSettings().rpc_max_payload, DataNodeSettings().rpc_max_payload):
        assert defaults.MAX_BLOCK_SIZE + MiB <= payload
    assert defaults.MIN_BLOCK_SIZE <= defaults.BLOCK_SIZE <= defaults.MAX_BLOCK_SIZE
    assert defaults.check_block_size(defaults.BLOCK_SIZE)


def test_settings_take_their_defaults_from_one_place():
    nn = NameNodeSettings()
    assert (nn.block_size, nn.replication, nn.min_part_size, nn.default_write_policy) == \
        (defaults.BLOCK_SIZE, defaults.REPLICATION, defaults.MIN_PART_SIZE, defaults.WRITE_POLICY)
    assert DEFAULT_BLOCK_SIZE == defaults.BLOCK_SIZE and MIN_PART == defaults.MIN_PART_SIZE
    assert GatewaySettings().max_object_size == defaults.MAX_OBJECT_SIZE


def test_namenode_refuses_an_invalid_default_block_size():
    assert NameNodeSettings(block_size=MiB).block_size == MiB
    with pytest.raises(pydantic.ValidationError, match="block size"):
        NameNodeSettings(block_size=1000)


def test_admin_models_check_the_block_size():
    assert BucketPatch(block_size=MiB).block_size == MiB
    assert BucketCreate(name="abc", block_size=2 * MiB).block_size == 2 * MiB
    for bad in (1000, 64 * MiB, 0, MiB + 1):
        with pytest.raises(pydantic.ValidationError):
            BucketPatch(block_size=bad)
        with pytest.raises(pydantic.ValidationError):
            BucketCreate(name="abc", block_size=bad)


class FakeNameNode:
    """The NameNode's RPC as the gateway's NameNodeClient sees it: bucket info and allocations, with a block size to
    change."""

    def __init__(self, bs: int, grace_s: float = 0.0) -> None:
        self.bs, self.calls, self.next_id, self.grace_s = bs, [], 1, grace_s
        self.abandoned: list[int] = []

    async def request(self, req, payload=b"", *, timeout=None):
        self.calls.append(op_name(type(req)))
        if isinstance(req, m.BucketInfo):
            return m.BucketRecord(name=req.bucket, block_size=self.bs), b""
        if isinstance(req, m.Allocate):
            ids = range(self.next_id, self.next_id + req.count)
            self.next_id += len(ids)
            return m.Allocation(block_size=self.bs, blocks=[m.Placed(i, (1,)) for i in ids], addrs={"1": "x:1"},
                                grace_s=self.grace_s), b""
        if isinstance(req, m.Abandon):
            self.abandoned += req.blocks
            return m.Done(), b""
        raise AssertionError(req)

    async def close(self) -> None:
        pass


def test_gateway_block_size_follows_the_namenode():
    async def main():
        c = gw_cluster.Cluster("127.0.0.1:1", "s")
        nn = c.namenode.rpc = FakeNameNode(MiB)
        assert await c.block_size("b") == MiB
        assert await c.block_size("b") == MiB and nn.calls == ["bucket_info"]  # cached
        nn.bs = 2 * MiB  # changed through another gateway: the next allocate reply tells this one
        await c._allocate("b", seed=1, index=1)
        assert await c.block_size("b") == 2 * MiB and nn.calls == ["bucket_info", "allocate"]
        nn.bs = 4 * MiB  # changed through this gateway: forget_bucket, then the next write asks again
        c.forget_bucket("b")
        assert await c.block_size("b") == 4 * MiB and nn.calls[-1] == "bucket_info"
        nn.bs = 8 * MiB  # changed elsewhere, no allocation since: asked again once LEASE_TTL_S has passed
        bs, told = c._block_size["b"]
        c._block_size["b"] = (bs, told - gw_cluster.LEASE_TTL_S - 1)  # as if told LEASE_TTL_S ago
        assert await c.block_size("b") == 8 * MiB and nn.calls[-1] == "bucket_info"
        await c.close()

    asyncio.run(main())


def test_gateway_leases_end_well_before_the_namenode_expires_them():
    """A leased block unused for a quarter of the NameNode's pending grace is given back, not used: the NameNode
    expires allocations after the grace and refuses a commit naming one (its copies are being deleted)."""
    async def main():
        c = gw_cluster.Cluster("127.0.0.1:1", "s")
        nn = c.namenode.rpc = FakeNameNode(MiB, grace_s=0.4)
        first, *_ = await c._lease("b")
        assert (await c._lease("b"))[0] == first + 1 and nn.calls == ["allocate"]  # from the pool
        await asyncio.sleep(0.15)  # over a quarter of the grace
        assert (await c._lease("b"))[0] == first + gw_cluster.LEASE_BATCH and nn.calls[-1] == "allocate"
        await asyncio.sleep(0.01)  # the stale ones were given back in the background
        assert nn.abandoned == list(range(first + 2, first + gw_cluster.LEASE_BATCH))
        nn.grace_s = 3600.0  # a long grace: LEASE_TTL_S is the bound
        c._drop_leases("b")
        await c._lease("b")
        assert c._leases["b"][0][3] - time.monotonic() == pytest.approx(gw_cluster.LEASE_TTL_S, abs=1)
        await c.close()

    asyncio.run(main())
