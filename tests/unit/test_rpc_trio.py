"""TrioRpcClient (the mount's DataNode client) against the services' RpcServer: frames, errors, auth, pooling."""
from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest
import trio

from epochfs.common import errors
from epochfs.common.messages import I64, Msg, Request
from epochfs.common.rpc import RpcServer, TrioRpcClient

SECRET = "s3cret"


class Echoed(Msg):
    n: int
    x: int | None = None


class Echo(Request, tag="echo"):
    """A test service's one op: the payload comes back reversed, `n` its length."""
    x: I64 | None = None
    fail: str = ""
    sleep: float = 0.0
    Reply = Echoed


async def _echo(req: Echo, payload) -> tuple[Echoed, bytes]:
    if req.fail:
        raise errors.NoSuchKey("not here", key=req.fail)
    if req.sleep:
        await asyncio.sleep(req.sleep)
    return Echoed(n=len(payload), x=req.x), bytes(payload[::-1])


class _Server:
    """An RpcServer on its own asyncio loop in a thread, as a DataNode serves."""

    def __init__(self, port: int = 0, open_ops: frozenset = frozenset()) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = RpcServer({Echo: _echo}, SECRET, open_ops=open_ops)
        if not port:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.port = port
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.server.start("127.0.0.1", port), self.loop).result(5)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.stop()


def test_calls_payloads_and_errors(server):
    big = os.urandom(5 << 20)

    async def main():
        c = TrioRpcClient("127.0.0.1", server.port, SECRET)
        head, out = await c.request(Echo(x=1))
        assert head == Echoed(n=0, x=1) and out == b""
        head, out = await c.request(Echo(), big)
        assert head.n == len(big) and out == big[::-1]
        with pytest.raises(errors.NoSuchKey) as e:
            await c.request(Echo(fail="k1"))
        assert e.value.details["key"] == "k1"
        async with trio.open_nursery() as n:  # concurrent calls take connections of their own
            for i in range(8):
                n.start_soon(c.request, Echo(), bytes([i]) * 70_000)
        assert len(c._idle) == 8
        await c.close()

    trio.run(main)


def test_wrong_secret_and_open_ops():
    s = _Server()
    closed = _Server(open_ops=frozenset({"echo"}))
    try:
        async def main():
            with pytest.raises(errors.Unauthorized):
                await TrioRpcClient("127.0.0.1", s.port, "wrong").request(Echo())
            head, _ = await TrioRpcClient("127.0.0.1", closed.port, "").request(Echo(x=2))  # no secret: open ops
            assert head.x == 2
            with pytest.raises(errors.Unauthorized):
                await TrioRpcClient("127.0.0.1", s.port, "").request(Echo())  # no open ops there
        trio.run(main)
    finally:
        s.stop()
        closed.stop()


def test_unreachable_slow_and_restarted_peers():
    s = _Server()
    port = s.port

    async def main():
        c = TrioRpcClient("127.0.0.1", port, SECRET, timeout=0.5)
        await c.request(Echo())
        with pytest.raises(errors.Unavailable):
            await c.request(Echo(sleep=2))  # the timeout ends the call, the connection is dropped
        await c.request(Echo())
        await trio.to_thread.run_sync(s.stop)
        with pytest.raises(errors.Unavailable):
            await c.request(Echo())  # refused: the pooled connection is dead and a new one can't be made
        again = await trio.to_thread.run_sync(lambda: _Server(port))
        await c.request(Echo())  # reconnects
        await trio.to_thread.run_sync(again.stop)
        third = await trio.to_thread.run_sync(lambda: _Server(port))
        await c.request(Echo())  # the pooled connection died with the old server: tried again on a new one
        await trio.to_thread.run_sync(third.stop)

    trio.run(main)
