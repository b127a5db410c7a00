"""A lean HTTP/1.1 transport for the S3Client's small requests: one request of known bytes, one answer read whole.

Why our own: every metadata call of the mount and of fsspec (lookup, create, commit of a small file, stat) is such a
request, and httpx's transport (httpcore's pool and h11's state machine over anyio) costs more CPU than the gateway
spends answering it: an `fs_lookup` loop under trio against a local cluster, 1,000 calls, two runs alternating,
1.43 / 1.83 ms of the caller's CPU per call through httpx's transport against 0.58 / 0.97 through this one (1.16 /
2.05 ms a call instead of 2.05 / 3.04). No maintained client fits: aiohttp is asyncio-only (the mount runs trio), and
httpcore is the cost. What it does is small: the request's head and body go out in one write, the answer is parsed
by httptools (llhttp, the parser uvicorn runs in the gateway), the connection is kept for the next request while the
server keeps it (an idle one that became readable, the server's close, is dropped before use; one idle longer than
IDLE_S too, below uvicorn's default keep-alive). It answers with an httpx.Response, raises httpx's exceptions, and
honours the request's timeout extension (pool, connect, and one deadline for sending and the answer), so the
S3Client sees no difference.

The rest stays with httpx's transport (`S3Client._send` chooses): HTTPS, request bodies that stream, answers read as a
stream (downloads): there a request's fixed cost is nothing next to its bytes.
"""
from __future__ import annotations

import asyncio
import select
import socket
import time
from typing import Any

import httptools
import httpx
import sniffio

IDLE_S = 4.0  # an idle connection older than this is closed, not reused (uvicorn's default keep-alive is 5 s; a
# gateway or proxy in front may use it, ours keeps 65 s)
RECV_BYTES = 1 << 16
MAX_ANSWER = 64 << 20  # bytes of an answer read whole, at most (the gateway's small answers are far below), unless
# the request's extensions say otherwise: "max_answer", a number or None (no bound: S3Client.get of a whole object,
# which its caller asked for in one piece)


class _Answer:
    """httptools' callbacks: the answer as it is parsed."""
    __slots__ = ("parser", "headers", "body", "size", "limit", "head_done", "done", "keep_alive")

    def __init__(self, limit: int | None) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.head_done = self.done = self.keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()  # (asked after the message's end, llhttp says no)

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.limit is not None and self.size > self.limit:
            raise OverflowError  # (httptools raises its own callback error: `run` says why)
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class _Exchange:
    """One request and its answer on one connection."""
    __slots__ = ("request", "sent", "keep")

    def __init__(self, request: httpx.Request) -> None:
        self.request = request
        self.sent = self.keep = False

    async def run(self, io, conn) -> httpx.Response:
        request = self.request
        head = [request.method.encode(), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        try:
            await io.send(conn, b"".join(head) + request.content)
        except OSError as e:
            raise httpx.WriteError(str(e), request=request) from None
        self.sent = True
        answer = _Answer(request.extensions.get("max_answer", MAX_ANSWER))
        parser = answer.parser
        head_only = request.method == "HEAD"
        while not (answer.done or head_only and answer.head_done):
            try:
                data = await io.recv(conn)
            except OSError as e:
                raise httpx.ReadError(str(e), request=request) from None
            if not data:
                raise httpx.RemoteProtocolError("server disconnected before its answer ended", request=request)
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as e:
                if answer.limit is not None and answer.size > answer.limit:
                    raise httpx.RemoteProtocolError(f"answer larger than {answer.limit} bytes",
                                                    request=request) from None
                raise httpx.RemoteProtocolError(f"bad answer: {e}", request=request) from None
        self.keep = answer.keep_alive and (answer.done or head_only and not answer.body)
        answer.parser = None  # (no cycle left for the garbage collector)
        return httpx.Response(parser.get_status_code(), headers=answer.headers, content=b"".join(answer.body),
                              extensions={"http_version": b"HTTP/1.1"})


class _Trio:
    """The socket calls under trio."""

    def __init__(self) -> None:
        import trio  # (the mount's; asyncio callers never import it)
        self.trio = trio
        self.timeout_error = trio.TooSlowError

    async def connect(self, host: str, port: int):
        return await self.trio.open_tcp_stream(host, port)

    async def send(self, conn, data: bytes) -> None:
        await conn.send_all(data)

    async def recv(self, conn) -> bytes:
        return await conn.receive_some(RECV_BYTES)

    def fileno(self, conn) -> int:
        return conn.socket.fileno()

    async def within(self, seconds: float | None, coro):
        """`coro`'s result, or timeout_error after `seconds`."""
        if seconds is None:
            return await coro
        with self.trio.fail_after(seconds):
            return await coro

    def semaphore(self, n: int):
        return self.trio.Semaphore(n)

    def try_acquire(self, sem) -> bool:
        try:
            sem.acquire_nowait()  # (acquire() would yield to the scheduler even when a slot is free)
            return True
        except self.trio.WouldBlock:
            return False

    def close(self, conn) -> None:
        conn.socket.close()


class _Asyncio:
    """The socket calls under asyncio: a non-blocking socket and the loop's sock_* calls (no stream buffering)."""
    timeout_error = TimeoutError

    async def connect(self, host: str, port: int):
        loop = asyncio.get_running_loop()
        error: OSError = OSError(f"{host}: no address")
        for family, kind, proto, _, addr in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, addr)
            except OSError as e:
                sock.close()
                error = e
                continue
            except BaseException:
                sock.close()
                raise
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (trio's streams set it too)
            return sock
        raise error

    async def send(self, conn, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(conn, data)

    async def recv(self, conn) -> bytes:
        return await asyncio.get_running_loop().sock_recv(conn, RECV_BYTES)

    def fileno(self, conn) -> int:
        return conn.fileno()

    async def within(self, seconds: float | None, coro):
        async with asyncio.timeout(seconds):
            return await coro

    def semaphore(self, n: int):
        return asyncio.Semaphore(n)

    def try_acquire(self, sem) -> bool:
        return False  # (asyncio's acquire() returns at once when a slot is free)

    def close(self, conn) -> None:
        conn.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """Plain-HTTP keep-alive connections to one server, at most `max_connections` at once, for requests whose body
    is bytes and whose answer is read whole (see the module's doc)."""

    def __init__(self, host: str, port: int, max_connections: int) -> None:
        self.host, self.port = host, port
        self.max_connections = max_connections
        self._io: _Trio | _Asyncio | None = None
        self._loop: tuple | None = None  # the event loop the pool's connections and semaphore belong to
        self._sem = None
        self._idle: list[tuple[Any, float]] = []  # (connection, idle since), the newest last

    def _setup(self) -> _Trio | _Asyncio:
        lib = sniffio.current_async_library()
        if lib == "trio":
            import trio
            loop = (lib, trio.lowlevel.current_trio_token())
        else:
            loop = (lib, asyncio.get_running_loop())
        if loop != self._loop:  # first use (an S3Client is made outside its loop), or another loop
            self._drop_idle()
            self._io = _Trio() if lib == "trio" else _Asyncio()
            self._sem, self._loop = self._io.semaphore(self.max_connections), loop
        return self._io

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            try:
                self._io.close(conn)
            except Exception:  # noqa: BLE001 -- a trio socket closed outside its run: its file closes with it
                pass

    def _reusable(self, io) -> Any | None:
        """An idle connection the server has not closed, if there is one (a readable idle socket: its close, or
        bytes nobody asked for)."""
        now = time.monotonic()
        while self._idle:
            conn, since = self._idle.pop()
            if now - since < IDLE_S and not select.select([io.fileno(conn)], [], [], 0)[0]:
                return conn
            io.close(conn)
        return None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        io = self._setup()
        t = request.extensions.get("timeout", {})
        if not io.try_acquire(self._sem):
            try:
                await io.within(t.get("pool"), self._sem.acquire())
            except io.timeout_error:
                raise httpx.PoolTimeout("no free connection", request=request) from None
        try:
            conn = self._reusable(io)
            if conn is None:
                try:
                    conn = await io.within(t.get("connect"), io.connect(self.host, self.port))
                except io.timeout_error:
                    raise httpx.ConnectTimeout(f"connect to {self.host}:{self.port}", request=request) from None
                except OSError as e:
                    raise httpx.ConnectError(f"{self.host}:{self.port}: {e}", request=request) from None
            state = _Exchange(request)
            try:
                # one deadline for the exchange (the S3Client gives every phase the same timeout): a scope per
                # read cost more than the rest of the call
                return await io.within(max(t.get("write") or 0, t.get("read") or 0) or None, state.run(io, conn))
            except io.timeout_error:
                raise (httpx.WriteTimeout("request not sent in time", request=request) if not state.sent else
                       httpx.ReadTimeout("no answer in time", request=request)) from None
            finally:  # (a cancelled or failed exchange leaves the connection in an unknown state: closed)
                if state.keep:
                    self._idle.append((conn, time.monotonic()))
                else:
                    io.close(conn)
        finally:
            self._sem.release()

    async def aclose(self) -> None:
        if self._io is not None:
            self._drop_idle()
