"""Reading around a DataNode that stops answering without closing its connections: a process stopped (SIGSTOP, a
debugger), a disk that hangs, a long pause. Its TCP connections stay open, so a read from it waits out the whole RPC
timeout (30-60 s) before the next holder is asked: measured with one of `epochfs up`'s DataNodes stopped, a 48 MiB
GET took 60 s and an fsspec read failed on its own 60 s timeout, for as long as the NameNode still counted the node
alive (and after that, 6 s more per read while the locations named it). Writes waited the same way for a primary
placed before the NameNode counted the node dead (10 s without a heartbeat).

So a read that another holder could serve gets `read_deadline` seconds (READ_FAILOVER_S, plus time for its bytes at
a slow disk's rate), passed as the call's own timeout (it costs nothing: the call has a timer anyway); then it is
given up (errors.Unavailable: the RPC and local-read clients close a connection whose call timed out, so nothing of
its late answer is taken for another call's), the node is read from last for AVOID_S (the reads after it don't pay
the wait again) and the next holder is asked. The last holder left always gets the full timeout: a cluster that is
merely slow still answers, only later. A write whose block has another node to go to gets `write_deadline` (a late
copy that the stopped node stores after all is the same bytes under the same block id: extra, never wrong)."""
from __future__ import annotations

import time

READ_FAILOVER_S = 2.0  # a healthy DataNode answers a read in milliseconds; a loaded 2-core test machine within ~1 s
FAILOVER_RATE = 50 << 20  # bytes/s added to the deadline: a large read from a busy disk is not a stopped node
WRITE_FAILOVER_S = 5.0  # a write also waits for its fsync, which a busy disk may hold up for seconds
AVOID_S = 10.0  # a node that missed a read's deadline is read from last this long


def read_deadline(nbytes: int, base_s: float = READ_FAILOVER_S) -> float:
    """Seconds a read of `nbytes` gets from a DataNode before the next holder is asked instead."""
    return base_s + max(nbytes, 0) / FAILOVER_RATE


def write_deadline(nbytes: int) -> float:
    """Seconds a write of `nbytes` to a primary that acknowledges alone (the async write policy) gets before the
    block goes to its next node: more than a read's, for the fsync it waits for on a busy disk. (With sync:N the
    primary also waits for its secondaries, which the next primary would wait for as well: no deadline then.)"""
    return WRITE_FAILOVER_S + max(nbytes, 0) / FAILOVER_RATE


def avoided(until: dict[str, float]) -> set[str]:
    """The addresses of `until` (address -> monotonic time) still avoided now."""
    now = time.monotonic()
    return {a for a, t in until.items() if t > now}
