"""Ports for services started on one machine (tests, benchmarks, `epochfs up`).

A port from bind(0), or any port in the kernel's ephemeral range, can be taken as the local port of one of the
machine's outgoing connections between the moment it is found free and the moment its service binds it: the service
then fails with EADDRINUSE. A benchmark's `epochfs up --ha` lost a NameNode that way (its RPC port in 32768-60999,
taken while etcd's members and the other NameNodes connected to each other). Ports below that range are handed out
only to those who ask for them by number.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux's default where it can't be read)."""
    try:
        lo, hi = map(int, _RANGE.read_text().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def in_ephemeral(first: int, last: int) -> bool:
    """Whether ports first..last (inclusive) meet the ephemeral range."""
    lo, hi = ephemeral_range()
    return first <= hi and last >= lo


_handed: set[int] = set()  # ports this process handed out: their services may not have bound them yet


def free_block(n: int = 1, host: str = "127.0.0.1", *, low: int = 10000) -> int:
    """The first of `n` consecutive ports on `host` that nobody listens on, below the ephemeral range, none of them
    handed out before by this process."""
    hi = ephemeral_range()[0] - n
    if hi <= low:
        raise RuntimeError(f"no room for {n} ports between {low} and the ephemeral range")
    for _ in range(1000):
        base = random.randint(low, hi)
        block = range(base, base + n)
        if not any(p in _handed for p in block) and all(is_free(host, p) for p in block):
            _handed.update(block)
            return base
    raise RuntimeError(f"no {n} free consecutive ports below the ephemeral range")


def is_free(host: str, port: int) -> bool:
    """Whether a service could bind `port` on `host` now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the services bind (a TIME_WAIT is no obstacle)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
