"""TrioRpcClient (the mount's DataNode client) against the services' RpcServer: frames, errors, auth, pooling."""
from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest
import trio

from epochfs.common import errors
from epochfs.common.rpc import RpcServer, TrioRpcClient

SECRET = "s3cret"


async def _echo(a, payload):
    if a.get("fail"):
        raise errors.NoSuchKey("not here", key=a["fail"])
    if a.get("sleep"):
        await asyncio.sleep(a["sleep"])
    return {"n": len(payload), "x": a.get("x")}, bytes(payload[::-1])


class _Server:
    """An RpcServer on its own asyncio loop in a thread, as a DataNode serves."""

    def __init__(self, port: int = 0, open_ops: frozenset = frozenset()) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = RpcServer({"echo": _echo}, SECRET, open_ops=open_ops)
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
        head, out = await c.call("echo", x=1)
        assert head == {"n": 0, "x": 1} and out == b""
        head, out = await c.call("echo", big)
        assert head["n"] == len(big) and out == big[::-1]
        with pytest.raises(errors.NoSuchKey) as e:
            await c.call("echo", fail="k1")
        assert e.value.details["key"] == "k1"
        async with trio.open_nursery() as n:  # concurrent calls take connections of their own
            for i in range(8):
                n.start_soon(c.call, "echo", bytes([i]) * 70_000)
        assert len(c._idle) == 8
        await c.close()

    trio.run(main)


def test_wrong_secret_and_open_ops():
    s = _Server()
    closed = _Server(open_ops=frozenset({"echo"}))
    try:
        async def main():
            with pytest.raises(errors.Unauthorized):
                await TrioRpcClient("127.0.0.1", s.port, "wrong").call("echo")
            head, _ = await TrioRpcClient("127.0.0.1", closed.port, "").call("echo", x=2)  # no secret: open ops
            assert head["x"] == 2
            with pytest.raises(errors.Unauthorized):
                await TrioRpcClient("127.0.0.1", s.port, "").call("echo")  # no open ops there
        trio.run(main)
    finally:
        s.stop()
        closed.stop()


def test_unreachable_slow_and_restarted_peers():
    s = _Server()
    port = s.port

    async def main():
        c = TrioRpcClient("127.0.0.1", port, SECRET, timeout=0.5)
        await c.call("echo")
        with pytest.raises(errors.Unavailable):
            await c.call("echo", sleep=2)  # the timeout ends the call, the connection is dropped
        await c.call("echo")
        await trio.to_thread.run_sync(s.stop)
        with pytest.raises(errors.Unavailable):
            await c.call("echo")  # refused: the pooled connection is dead and a new one can't be made
        again = await trio.to_thread.run_sync(lambda: _Server(port))
        await c.call("echo")  # reconnects
        await trio.to_thread.run_sync(again.stop)
        third = await trio.to_thread.run_sync(lambda: _Server(port))
        await c.call("echo")  # the pooled connection died with the old server: tried again on a new one
        await trio.to_thread.run_sync(third.stop)

    trio.run(main)
