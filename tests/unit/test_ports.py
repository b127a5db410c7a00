"""common/ports.py: ports for local services stay out of the kernel's ephemeral range and are never handed out twice."""
from __future__ import annotations

import socket

from epochfs.common import ports


def test_blocks_lie_below_the_ephemeral_range_and_never_overlap():
    lo, _ = ports.ephemeral_range()
    seen: set[int] = set()
    for n in (1, 1, 2, 17, 27, 30):
        base = ports.free_block(n)
        block = set(range(base, base + n))
        assert max(block) < lo
        assert not block & seen
        seen |= block


def test_a_port_someone_listens_on_is_not_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.free_block()))
        s.listen()
        assert not ports.is_free("127.0.0.1", s.getsockname()[1])


def test_meeting_the_ephemeral_range():
    lo, hi = ports.ephemeral_range()
    assert ports.in_ephemeral(lo - 5, lo)
    assert ports.in_ephemeral(hi, hi + 30)
    assert not ports.in_ephemeral(lo - 26, lo - 1)
    assert not ports.in_ephemeral(9000, 9025)
