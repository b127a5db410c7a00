"""Write acknowledgement policies: when a primary DataNode may acknowledge a block.

  async     the primary acknowledges once its own copy is on its disk (WAL fsynced, or for a block of 2 MiB and
            more its file and the ingest's MANIFEST entry fsynced) and replicates in the background (passive
            replication; each secondary fsyncs its copy too). An acknowledged block survives a crash or power loss
            of the primary, but exists on one node only until the push reaches a secondary, typically a few
            milliseconds: if the primary's disk is lost in that window, the block is lost.
  sync:N    the primary acknowledges only after N replicas, itself included, are on disk (fsynced as above on each
            of N nodes); if fewer than N can be written the write fails (503) and nothing becomes visible.

Concurrent writes on a DataNode share their fsyncs (group commit, common/kv.WalSync).

A bucket's policy is stored with the bucket ("wp"); buckets without one use the NameNode's NN_DEFAULT_WRITE_POLICY.
"""
from __future__ import annotations

import re

from . import errors

MAX_SYNC = 16
_SYNC = re.compile(r"^sync:([1-9][0-9]?)$")


def parse(policy: str) -> int:
    """The replicas (the primary included) that must be durable before a write is acknowledged: 1 for async."""
    if policy == "async":
        return 1
    m = _SYNC.match(policy or "")
    if m is None or int(m.group(1)) > MAX_SYNC:
        raise errors.InvalidInput(f"invalid write policy {policy!r}: use async or sync:N (1 <= N <= {MAX_SYNC})")
    return int(m.group(1))


def validate(policy: str) -> str:
    parse(policy)
    return policy
