"""LeanTransport (common/http1.py) against a real HTTP/1.1 server on loopback, under trio and asyncio: keep-alive,
the server's closes, HEAD, timeouts, a cut answer, the connection limit; and the S3Client routes only small
requests through it."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest
import trio

from epochfs.common.client import S3Client
from epochfs.common.http1 import LeanTransport


class Server:
    """A thread serving one connection per thread. Paths: /ok (keep-alive), /close (Connection: close),
    /drop (answers, then closes the idle connection without saying so), /head (a HEAD's Content-Length without a
    body), /slow (answers after 0.5 s), /never (never answers), /cut (half an answer, then closes)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode().split("\r\n")
                try:
                    method, path, _ = lines[0].split(" ")
                except ValueError:  # (a chunked body, which this server does not read: the S3Client test's)
                    return
                length = next((int(line.split(":")[1]) for line in lines[1:]
                               if line.lower().startswith("content-length:")), 0)
                while len(buf) < length:
                    buf += conn.recv(65536)
                body, buf = buf[:length], buf[length:]
                with self.lock:
                    self.bodies.append(body)
                answer = b"answer to " + path.encode() + b" " + body
                if path == "/never":
                    time.sleep(5)
                    return
                if path == "/slow":
                    time.sleep(0.5)
                if path == "/cut":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
                    return
                extra = b"Connection: close\r\n" if path == "/close" else b""
                size = len(answer)
                if method == "HEAD":
                    answer = b""
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (size, extra, answer))
                if path in ("/close", "/drop"):
                    return
        finally:
            conn.close()
            with self.lock:
                self.open -= 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _req(port: int, path: str, method: str = "GET", body: bytes = b"", timeout: float = 3.0) -> httpx.Request:
    return httpx.Request(method, f"http://127.0.0.1:{port}{path}", content=body,
                         extensions={"timeout": httpx.Timeout(timeout).as_dict()})


async def _scenario(server: Server, sleep) -> None:
    t = LeanTransport("127.0.0.1", server.port, max_connections=2)
    for i in range(5):  # one connection for all
        r = await t.handle_async_request(_req(server.port, "/ok", "POST", b"x%d" % i))
        assert (r.status_code, r.content) == (200, b"answer to /ok x%d" % i)
    assert server.connections == 1
    r = await t.handle_async_request(_req(server.port, "/head", "HEAD"))  # headers only, the connection still good
    assert (r.status_code, r.content, r.headers["content-length"]) == (200, b"", "16")
    assert (await t.handle_async_request(_req(server.port, "/ok"))).content == b"answer to /ok "
    assert server.connections == 1
    assert (await t.handle_async_request(_req(server.port, "/close"))).content == b"answer to /close "
    assert (await t.handle_async_request(_req(server.port, "/drop"))).content == b"answer to /drop "
    await sleep(0.2)  # the server has closed the idle connection: not reused, no error
    assert (await t.handle_async_request(_req(server.port, "/ok"))).content == b"answer to /ok "
    assert server.connections == 3
    with pytest.raises(httpx.RemoteProtocolError):
        await t.handle_async_request(_req(server.port, "/cut"))
    with pytest.raises(httpx.ReadTimeout):
        await t.handle_async_request(_req(server.port, "/never", timeout=0.3))
    assert (await t.handle_async_request(_req(server.port, "/ok"))).content == b"answer to /ok "
    await t.aclose()


def test_keep_alive_closes_head_timeouts_and_cut_answers_under_trio(server):
    trio.run(_scenario, server, trio.sleep)


def test_keep_alive_closes_head_timeouts_and_cut_answers_under_asyncio(server):
    asyncio.run(_scenario(server, asyncio.sleep))


def test_at_most_max_connections_at_once(server):
    async def main():
        t = LeanTransport("127.0.0.1", server.port, max_connections=2)
        async with trio.open_nursery() as n:
            for i in range(6):
                n.start_soon(t.handle_async_request, _req(server.port, "/slow", "POST", b"%d" % i))
        assert server.most_open == 2 and server.connections == 2
        assert sorted(server.bodies) == [b"%d" % i for i in range(6)]
        with pytest.raises(httpx.PoolTimeout):  # both taken for longer than the pool timeout
            async with trio.open_nursery() as n:
                for _ in range(2):
                    n.start_soon(t.handle_async_request, _req(server.port, "/slow"))
                await trio.sleep(0.05)
                await t.handle_async_request(_req(server.port, "/ok", timeout=0.1))
        await t.aclose()
    trio.run(main)


def test_connect_refused_is_httpx_connect_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there

    async def main():
        with pytest.raises(httpx.ConnectError):
            await LeanTransport("127.0.0.1", port, 2).handle_async_request(_req(port, "/ok"))
    trio.run(main)
    asyncio.run(main())


def test_the_s3_client_sends_only_small_requests_through_it(server):
    """Bytes in, the whole answer back: the lean transport; a streamed body or answer: httpx's (here both reach
    the same server; the lean transport's connection count tells which went where)."""
    async def main():
        c = S3Client(f"http://127.0.0.1:{server.port}", "AK", "SK")
        sent = []
        lean = c._lean.handle_async_request

        async def counted(req):
            sent.append(req.url.path)
            return await lean(req)
        c._lean.handle_async_request = counted
        await c._send("POST", "b", "small", content=b"abc")
        await c._send("GET", "b", "big", stream=True)

        async def pieces():
            yield b"a"
            yield b"b"
        await c._send("PUT", "b", "streamed", content=pieces())
        await c.close()
        assert sent == ["/b/small"]
    trio.run(main)


def test_an_answer_past_its_bound_is_refused_saying_so_and_an_objects_bytes_are_not_bounded(server, monkeypatch):
    """A whole-read answer is bounded (MAX_ANSWER, or the request's "max_answer"): past it, an httpx error that
    names the bound. An object's bytes asked for in one piece (S3Client.get) and a batch read are not: before,
    `get` of an object larger than 64 MiB (fsspec's cat_file) failed with "bad answer: `on_body` callback error"."""
    async def main():
        t = LeanTransport("127.0.0.1", server.port, max_connections=2)
        req = _req(server.port, "/ok", "POST", b"x" * 100)
        req.extensions["max_answer"] = 50
        with pytest.raises(httpx.RemoteProtocolError, match="answer larger than 50 bytes"):
            await t.handle_async_request(req)
        req = _req(server.port, "/ok", "POST", b"x" * 100)
        req.extensions["max_answer"] = None
        assert (await t.handle_async_request(req)).content == b"answer to /ok " + b"x" * 100
        await t.aclose()

        monkeypatch.setattr("epochfs.common.http1.MAX_ANSWER", 64)  # every answer below is larger than that
        c = S3Client(f"http://127.0.0.1:{server.port}", "AK", "SK")
        with pytest.raises(httpx.RemoteProtocolError, match="answer larger than 64 bytes"):
            await c._send("POST", "b", "small", content=b"y" * 100)
        assert await c.get("b", "k" * 100) == b"answer to /b/" + b"k" * 100 + b" "
        await c.close()
    trio.run(main)


def test_one_transport_across_event_loops(server):
    """A connection and the connection limit belong to one event loop: another loop (a second asyncio.run, trio)
    starts its own, without error."""
    t = LeanTransport("127.0.0.1", server.port, max_connections=1)

    async def one():
        return (await t.handle_async_request(_req(server.port, "/ok", "POST", b"1"))).content

    assert asyncio.run(one()) == b"answer to /ok 1"
    assert asyncio.run(one()) == b"answer to /ok 1"
    assert trio.run(one) == b"answer to /ok 1"
    assert asyncio.run(one()) == b"answer to /ok 1"
    assert server.connections == 4
