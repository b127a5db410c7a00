"""Cluster-wide defaults and their bounds: the one home of the numbers more than one part of epochfs relies on.

Settings classes keep their own fields (NN_BLOCK_SIZE, ...) whose defaults come from here; code that needs a bound
(the gateway checking x-epochfs-block-size, the admin API, the CLI) checks it here too.
"""
from __future__ import annotations

from . import errors

KiB, MiB = 1 << 10, 1 << 20

PORT = 9000
"""`epochfs up`'s S3 port; the services of a local cluster take the ports after it."""
ENDPOINT = f"http://127.0.0.1:{PORT}"
"""The gateway clients talk to when given none (and AWS_ENDPOINT_URL is unset): a local `epochfs up`."""

RPC_MAX_PAYLOAD = 64 * MiB
"""Largest request payload an RPC server (NameNode, DataNode) accepts by default: a block is the largest."""

BLOCK_SIZE = 4 * MiB
"""Block size of a bucket created without one (NN_BLOCK_SIZE sets the cluster's own default)."""
BLOCK_SIZE_STEP = 64 * KiB
MIN_BLOCK_SIZE = 64 * KiB
MAX_BLOCK_SIZE = 32 * MiB
"""A block travels whole in one RPC frame (put, replication push): the largest leaves half the frame bound as
margin, and a gateway holds up to three blocks of each upload in memory."""

REPLICATION = 3
"""Replicas of each block of a bucket created without its own factor (NN_REPLICATION)."""
MAX_REPLICATION = 16

WRITE_POLICY = "async"
"""Write acknowledgement of buckets that set none (NN_DEFAULT_WRITE_POLICY; common/write_policy.py)."""

MIN_PART_SIZE = 5 * MiB
"""Smallest multipart part but the last (S3's 5 MiB; NN_MIN_PART_SIZE)."""

MAX_OBJECT_SIZE = 5 << 40
"""Largest object or file (S3's 5 TiB; GW_MAX_OBJECT_SIZE)."""


def check_block_size(n: int) -> int:
    """`n` if it is a valid block size (a multiple of 64 KiB from 64 KiB to 32 MiB), else InvalidInput."""
    if type(n) is not int or not MIN_BLOCK_SIZE <= n <= MAX_BLOCK_SIZE or n % BLOCK_SIZE_STEP:
        raise errors.InvalidInput(f"invalid block size {n!r}: a multiple of {BLOCK_SIZE_STEP} bytes (64 KiB) from "
                                  f"{MIN_BLOCK_SIZE} (64 KiB) to {MAX_BLOCK_SIZE} (32 MiB)")
    return n


def parse_block_size(text: str) -> int:
    """A block size given as decimal bytes (the x-epochfs-block-size header), checked; else InvalidInput."""
    s = text.strip()
    if not (s.isascii() and s.isdigit() and len(s) <= 12):
        raise errors.InvalidInput(f"invalid block size {text!r}: give it in bytes, a multiple of {BLOCK_SIZE_STEP} "
                                  f"from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}")
    return check_block_size(int(s))
