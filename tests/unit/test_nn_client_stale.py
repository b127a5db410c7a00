"""Stale reads (HA observer reads) in the typed contract and in NameNodeClient: only the reads that carry a `stale`
field can reach a standby, and S3's HEAD/GET/LIST requests have none; the client sends such reads to the standbys in
turn, moves on from one that refuses (TooStale) or does not answer, goes to the active NameNode when none serves,
and carries its msync position. Real RpcServers on loopback play the NameNodes."""
from __future__ import annotations

import asyncio
import contextlib

import msgspec

from epochfs.common import errors, ports
from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient
from epochfs.common.rpc import RpcClient, RpcServer

SECRET = "s3cret"


def requests_with_stale() -> set[type]:
    out, todo = set(), [m.Request]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if "stale" in sub.__struct_fields__:
                out.add(sub)
    return out


def test_only_the_declared_reads_accept_stale_answers_and_s3_reads_do_not():
    assert requests_with_stale() == set(m.STALE_READS)
    for strong in (m.Stat, m.ListObjects, m.ListVersions, m.BucketInfo, m.BucketList, m.FsLayout, m.Msync):
        assert "stale" not in strong.__struct_fields__, strong
    # on the wire: absent unless asked for; min_seq travels
    assert b"stale" not in msgspec.json.encode(m.Manifest(bucket="b"))
    req = msgspec.json.decode(msgspec.json.encode(m.FsReaddir(ino=5, stale=m.StaleOk(min_seq=9))), type=m.FsReaddir)
    assert req.stale == m.StaleOk(min_seq=9)


class Fake:
    """A NameNode answering manifest (the key of its one item names who answered, with the min_seq it was sent) and
    msync. `mode`: "active" (answers everything), "standby" (stale reads only; NotLeader to the rest), "stale"
    (TooStale to stale reads), "frozen" (never answers)."""

    def __init__(self, name: str, mode: str) -> None:
        self.name, self.mode, self.port = name, mode, ports.free_block()
        self.addr = f"127.0.0.1:{self.port}"
        self.calls = 0
        self.server = RpcServer({m.Manifest: self._manifest, m.Msync: self._msync}, SECRET)

    async def _manifest(self, req: m.Manifest, _):
        self.calls += 1
        if self.mode == "frozen":
            await asyncio.sleep(30)
        if self.mode != "active":
            if req.stale is None:
                raise errors.NotLeader(f"{self.name} is a standby", leader="")
            if self.mode == "stale":
                raise errors.TooStale(f"{self.name} is behind", leader="")
        seq = req.stale.min_seq if req.stale else -1
        return m.ManifestPage(items=[m.ManifestItem(self.name, seq, "", 0)])

    async def _msync(self, req, _):
        if self.mode != "active":
            raise errors.NotLeader(f"{self.name} is a standby", leader="")
        return m.LogPosition(seq=42)


@contextlib.asynccontextmanager
async def cluster(*modes: str):
    """(fake NameNodes in these modes, a client of all of them that found the active one), stopped after."""
    fakes = [Fake(f"nn{i}", mode) for i, mode in enumerate(modes)]
    for f in fakes:
        await f.server.start("127.0.0.1", f.port)
    c = NameNodeClient([RpcClient("127.0.0.1", f.port, SECRET, timeout=5.0) for f in fakes], retry_s=2.0)
    try:
        if len(fakes) > 1:
            await c.msync()  # finds the active one (a strong call), as the gateway's first calls do
        yield fakes, c
    finally:
        await c.close()
        for f in fakes:
            await f.server.stop()


async def who(c: NameNodeClient, stale: bool = True) -> tuple[str, int]:
    item = (await c.manifest("b", stale=m.StaleOk() if stale else None)).items[0]
    return item.key, item.size


def test_stale_reads_go_to_the_standbys_in_turn_and_the_rest_to_the_active():
    async def go():
        async with cluster("active", "standby", "standby") as (fakes, c):
            got = [(await who(c))[0] for _ in range(6)]
            assert sorted(got) == ["nn1"] * 3 + ["nn2"] * 3 and got[0] != got[1]
            assert fakes[0].calls == 0
            assert await who(c, stale=False) == ("nn0", -1)  # not stale: the active one
            assert c.stale_reads == 6 and c.stale_fallbacks == 0
    asyncio.run(go())


def test_msync_position_travels_with_stale_reads():
    async def go():
        async with cluster("active", "standby") as (fakes, c):
            assert c.seen_seq == 42
            assert await who(c) == ("nn1", 42)
    asyncio.run(go())


def test_a_refusing_standby_is_skipped_and_with_none_serving_the_active_answers():
    async def go():
        async with cluster("active", "stale", "standby") as (fakes, c):
            got = [(await who(c))[0] for _ in range(4)]
            assert got == ["nn2"] * 4
            assert fakes[1].calls == 1  # refused once, then left alone for STALE_REFUSED_S
            fakes[2].mode = "stale"
            c._stale_skip.clear()
            assert (await who(c))[0] == "nn0" and c.stale_fallbacks == 1
    asyncio.run(go())


def test_a_standby_that_does_not_answer_costs_one_short_timeout():
    async def go():
        async with cluster("active", "frozen", "standby") as (fakes, c):
            c.STALE_TIMEOUT_S = 0.2
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            got = [(await who(c))[0] for _ in range(5)]
            assert got == ["nn2"] * 5 and fakes[1].calls == 1
            assert loop.time() - t0 < 1.5
    asyncio.run(go())


def test_one_namenode_gets_stale_reads_as_any_read():
    async def go():
        async with cluster("active") as (_, c):
            assert await who(c) == ("nn0", 0) and c.stale_reads == 0
    asyncio.run(go())
