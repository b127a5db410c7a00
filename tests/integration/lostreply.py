"""A TCP relay in front of a service's RPC port that loses replies on purpose: the request reaches the service and is
carried out, and the relay then closes the caller's connection instead of passing the answer on -- what the caller
sees when the service is killed, or the network drops, right after it acted. Frames are read as common/rpc.py
writes them (8-byte header >II json_len, payload_len; the JSON head; the payload); a connection carries one call at
a time, so each reply answers the last request seen on it."""
from __future__ import annotations

import asyncio
import json
import struct
import threading

_HDR = struct.Struct(">II")


class LostReplies:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.drop: dict[str, int] = {}  # op -> how many of its next replies to lose
        self.dropped: list[str] = []  # ops whose reply was lost, in order
        self.calls: dict[str, int] = {}  # op -> requests relayed
        self._conns: set[asyncio.Task] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def lose(self, op: str, n: int = 1) -> None:
        """Lose the replies to the next `n` requests `op` (after the service carried them out)."""
        self._loop.call_soon_threadsafe(self.drop.__setitem__, op, n)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        self._conns.add(me)
        try:
            await self._relay(cr, cw)
        finally:
            self._conns.discard(me)

    async def _relay(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        """Relay one connection: the caller's side `cr`/`cw` to a new one to the service, until either side ends or
        `down` loses a reply (then the caller's connection is closed)."""
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            cw.close()
            return
        tasks = [asyncio.ensure_future(t) for t in self._pumps(cr, cw, ur, uw)]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            cw.close()
            uw.close()

    def _pumps(self, cr, cw, ur, uw):
        """The coroutines carrying requests up (cr -> uw) and replies down (ur -> cw): RPC frames."""
        ops: list[str] = []

        async def frames(r: asyncio.StreamReader):
            while True:
                hdr = await r.readexactly(_HDR.size)
                jl, pl = _HDR.unpack(hdr)
                head = await r.readexactly(jl)
                yield hdr + head + await r.readexactly(pl), head

        async def up() -> None:
            async for frame, head in frames(cr):
                op = json.loads(head).get("op", "")
                ops.append(op)
                self.calls[op] = self.calls.get(op, 0) + 1
                uw.write(frame)
                await uw.drain()

        async def down() -> None:
            async for frame, _ in frames(ur):
                op = ops.pop(0) if ops else ""
                if self.drop.get(op):
                    self.drop[op] -= 1
                    self.dropped.append(op)
                    return  # the service acted; its caller never hears of it
                cw.write(frame)
                await cw.drain()

        return up(), down()

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for t in list(self._conns):
                t.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


class LostHttpReplies(LostReplies):
    """The same in front of an HTTP/1.1 server (the gateway): `lose(marker)` loses the answers to the next requests
    whose head holds `marker` (e.g. "files=1", a query string). Bytes are relayed as they come; a request is known
    by its head's bytes, which arrive in one piece from a client that sends one request at a time per connection
    (httpx, boto3), and its answer is the next bytes the server sends on that connection."""

    def _pumps(self, cr, cw, ur, uw):
        doomed: list[str] = []  # the marker of a request whose answer is to be lost

        async def up() -> None:
            while data := await cr.read(1 << 16):
                for marker, n in self.drop.items():
                    if n and marker.encode() in data:
                        self.drop[marker] -= 1
                        self.calls[marker] = self.calls.get(marker, 0) + 1
                        doomed.append(marker)
                uw.write(data)
                await uw.drain()

        async def down() -> None:
            while data := await ur.read(1 << 16):
                if doomed:
                    self.dropped.append(doomed.pop())
                    return  # the server acted; its caller never hears of it
                cw.write(data)
                await cw.drain()

        return up(), down()


def start_behind_relay(c) -> LostReplies:
    """Start cluster `c` (tests/integration/cluster.py, not started) with its gateway calling the NameNode through a
    LostReplies relay; the relay (close it after the cluster)."""
    c.start_namenode()
    relay = LostReplies("127.0.0.1", c.ports["nn"][1])
    c.extra["gw"]["GW_NAMENODE"] = f"127.0.0.1:{relay.port}"
    for i in range(1, c.n_dn + 1):
        c.start_datanode(i)
    c.start_gateway()
    return relay
