"""common/defaults.py: block-size bounds and the settings that take their defaults from it."""
from __future__ import annotations

import pydantic
import pytest

from epochfs.common import defaults, errors, rpc
from epochfs.common.blocks import DEFAULT_BLOCK_SIZE
from epochfs.common.client import MIN_PART
from epochfs.datanode.config import DataNodeSettings
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

