"""Internal RPC between epochfs services: length-prefixed frames over persistent TCP connections.

Why not HTTP: measured on this machine (bench/rpc_style.py), one 128 KiB request/response costs 133 us of CPU over a raw
asyncio stream with this framing, and 1,473 us with httpx against uvicorn -- 11x. Block data crosses two such hops on
every S3 read and write, so the hot path uses these frames; services still serve HTTP for /healthz and /metrics.
Both ends read frames with asyncio's BufferedProtocol (recv_into exact-size buffers) rather than StreamReader: in the
S3 benchmark that took a 128 KiB PUT from 4.5 to 3.9 ms of server CPU (three replicas) and a GET from 1.1 to 0.84 ms.

Frame (both directions): 8-byte header  >II  (json_len, payload_len), then a JSON object, then the raw payload.
A request's JSON is a typed message from common/messages.py (a tagged msgspec Struct: "op" names it, its fields are
the arguments), decoded straight into its type by the server; a reply is the request's `Reply` type, or
{"err": ClassName, "msg": text, "details": {...}} for a DomainError (re-raised by name on the caller's side; no reply
type has a field named "err", so a reply that starts with it is an error). Services are called through the typed
clients in common/clients.py. The first frame on a connection is {"op": "hello", "secret": ...}:
a connection that does not present the cluster secret is closed, except that a hello with no secret at all may use
the server's open ops (a DataNode's tokened reads and writes for native clients, common/readtoken.py and
common/writetoken.py) and nothing else.

Bounds, checked on each frame's 8-byte header before a byte of its body is buffered: until its hello a connection
may send HELLO_MAX_JSON bytes of JSON and no payload, and must say hello within HELLO_TIMEOUT_S; a connection without
the secret (open ops only) LIMITED_MAX_JSON and no payload, unless the server's `open_payload` check, run on the
frame's decoded head before its payload is read, allows it (a DataNode's tokened write: the write token must allow
each block's size) -- a refused payload is read past in 64 KiB pieces and never kept; one with the secret MAX_JSON and
the server's `max_payload` (the largest block plus margin). A frame over its bound closes the connection at once, so one
unauthenticated peer can make a server buffer a few KiB, not the 1 GiB its header may announce.
"""
from __future__ import annotations

import asyncio
import ctypes
import hmac
import logging
import os
import socket
import struct
import time
from typing import Any, Awaitable, Callable, Union

import msgspec
import orjson

from . import defaults, errors
from .messages import Request, op_name
from .metrics import RPC_CALLS, series

log = logging.getLogger("epochfs.rpc")

_HDR = struct.Struct(">II")
MAX_JSON = 64 << 20  # a block report of a few million block ids
MAX_PAYLOAD = 1 << 30  # what a client accepts in a reply (from a server it chose to call)
DEFAULT_MAX_PAYLOAD = defaults.RPC_MAX_PAYLOAD  # what a server accepts in a request by default (ServiceSettings.rpc_max_payload)
HELLO_MAX_JSON = 4096
LIMITED_MAX_JSON = 4 << 20  # a native client's tokened batch read: its reads and the grant
HELLO_TIMEOUT_S = 10.0
SEND_STALL_S = 30.0  # a reply sent from a file (FileSpan) to a peer that reads nothing for this long is cut

# A handler takes the decoded request and its payload and returns its Reply, or (Reply, payload).
Handler = Callable[[Any, bytes], Awaitable[Any]]
_ERR_PREFIX = b'{"err":'
_encode = msgspec.json.Encoder().encode
_reply_decoders: dict[type, msgspec.json.Decoder] = {}

# bytearray(n) zeroes its n bytes (23 us per MiB here, 90 us for a 4 MiB block) only for recv_into to overwrite them
# (and makes them resident before the peer has sent any: a buffer grows only as its bytes arrive this way);
# the C API makes one left uninitialized, and a frame's payload is handed on only once every byte has arrived.
_uninitialized_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_uninitialized_bytearray.restype = ctypes.py_object
_uninitialized_bytearray.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]


def payload_buffer(n: int) -> bytearray:
    """A buffer of n bytes to be filled whole (recv_into, preadv): left uninitialized from 64 KiB on."""
    return _uninitialized_bytearray(None, n) if n >= 65536 else bytearray(n)


class FileSpan:
    """A part of a reply's payload that the server sends from a file with sendfile(2), so that its bytes never
    enter the process: a DataNode's reads of whole chunks (datanode/blockstore.py). Owns `fd`, which the server
    closes once the reply is sent or dropped.

    Why: the DataNode's share of a large read was a pread into its memory (a copy), a CRC over it and a send (a
    second copy). Measured on this machine (4 MiB block files to a loopback socket, cold page cache): pread + CRC +
    send 0.56-0.66 ms of CPU per MiB, sendfile 0.27-0.35; the reader checks the CRCs instead (crc32c: 0.05 ms per
    MiB here)."""
    __slots__ = ("fd", "offset", "length")

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd, self.offset, self.length = fd, offset, length

    def __len__(self) -> int:
        return self.length

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _frame(j: bytes, payload) -> list:
    """The buffers of one frame with JSON head `j`; `payload` is a bytes-like object or a list of them (sent
    without joining)."""
    if isinstance(payload, list):
        return [_HDR.pack(len(j), sum(len(p) for p in payload)) + j, *payload]
    if len(payload) < 65536:
        return [_HDR.pack(len(j), len(payload)) + j + payload]
    return [_HDR.pack(len(j), len(payload)) + j, payload]


def _request_frame(req, payload) -> list:
    """A request's frame (`req` a typed Request, or the hello dict)."""
    return _frame(orjson.dumps(req) if isinstance(req, dict) else _encode(req), payload)


def _decode_reply(raw, rtype: type):
    """A reply's head as `rtype`, or the DomainError it carries raised."""
    if raw[:len(_ERR_PREFIX)] == _ERR_PREFIX:
        head = orjson.loads(raw)
        raise errors.by_name(head["err"])(head.get("msg", ""), **(head.get("details") or {}))
    dec = _reply_decoders.get(rtype)
    if dec is None:
        dec = _reply_decoders[rtype] = msgspec.json.Decoder(rtype)
    return dec.decode(raw)


class _FrameProtocol(asyncio.BufferedProtocol):
    """Reads frames with recv_into straight into buffers of the frame's exact size: a 1 MiB block arrives with no
    intermediate copy, where a StreamReader copies it twice. Subclasses get `frame_received(head, payload)`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._hdr = bytearray(8)
        self._buf = self._hdr
        self._pos = 0
        self._stage = 0  # 0: header, 1: JSON, 2: payload, 3: a refused payload, read past
        self._payload_len = 0
        self._json = b""
        self._refusal, self._left = b"", 0  # stage 3: the reply to send, the payload bytes still to read past
        self._drained: asyncio.Future | None = None
        self.closed = False
        self.max_json, self.max_payload = MAX_JSON, MAX_PAYLOAD  # bounds of the next frame's parts

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)  # drain() raises; no exception is left in a future nobody awaits

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def drain(self) -> None:
        if self._drained is not None:
            await self._drained
            if self.closed:
                raise ConnectionError("connection lost while sending")

    def write_frame(self, head: bytes, payload=b"") -> None:
        self.transport.writelines(_frame(head, payload))

    def get_buffer(self, sizehint: int):
        return memoryview(self._buf)[self._pos:]

    def buffer_updated(self, nbytes: int) -> None:
        self._pos += nbytes
        while self._pos == len(self._buf):
            if self._stage == 0:
                jl, pl = _HDR.unpack(self._hdr)
                if jl > self.max_json or pl > self.max_payload:
                    self.frame_too_large(jl, pl)
                    return
                self._payload_len, self._stage, self._buf, self._pos = pl, 1, payload_buffer(jl), 0
            elif self._stage == 1:
                self._json = self._buf
                refusal = self.check_head(self._json, self._payload_len) if self._payload_len else None
                if refusal is not None:  # the payload is read into a small scratch buffer and dropped
                    self._refusal, self._left = refusal, self._payload_len
                    self._stage, self._buf, self._pos = 3, bytearray(min(self._left, 65536)), 0
                    continue
                self._stage, self._buf, self._pos = 2, payload_buffer(self._payload_len), 0
            elif self._stage == 3:
                self._left -= len(self._buf)
                if self._left:
                    self._buf, self._pos = (self._buf if self._left >= len(self._buf) else
                                            bytearray(self._left)), 0
                    continue
                self._stage, self._buf, self._pos = 0, self._hdr, 0
                self.write_frame(self._refusal)
                return
            else:
                head, payload = self._json, self._buf
                self._stage, self._buf, self._pos = 0, self._hdr, 0
                self.frame_received(head, payload)
                return

    def frame_received(self, head: bytearray, payload: bytearray) -> None:
        """A whole frame arrived: its JSON head (undecoded) and its payload."""
        raise NotImplementedError

    def check_head(self, head: bytearray, payload_len: int) -> bytes | None:
        """Called with a frame's JSON head before its payload (of `payload_len` > 0 bytes) is read: None to read
        it, or the reply to answer instead, once the payload has been read past without keeping it."""
        return None

    def frame_too_large(self, json_len: int, payload_len: int) -> None:
        self.transport.abort()


class _ServerConn(_FrameProtocol):
    """Server side of one connection: the first frame must carry the cluster secret; then each request is handled
    in turn (a client sends the next request only after the reply)."""

    def __init__(self, server: "RpcServer") -> None:
        super().__init__()
        self.server = server
        self.authed = False
        self.limited = False  # a connection without the secret: only the server's open ops (tokened reads)
        self.max_json, self.max_payload = HELLO_MAX_JSON, 0
        self._hello_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.server._conns.add(self)
        self._hello_timer = asyncio.get_running_loop().call_later(HELLO_TIMEOUT_S, self._no_hello)

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        self.server._conns.discard(self)
        if self._hello_timer is not None:
            self._hello_timer.cancel()

    def _no_hello(self) -> None:
        log.warning("rpc: closing a connection from %s that sent no hello in %.0f s", self._peer(), HELLO_TIMEOUT_S)
        self.transport.abort()

    def _peer(self) -> str:
        return str(self.transport.get_extra_info("peername"))

    def frame_too_large(self, json_len: int, payload_len: int) -> None:
        log.warning("rpc: closing the connection from %s: a frame of %d + %d bytes is over its bounds (%d + %d%s)",
                    self._peer(), json_len, payload_len, self.max_json, self.max_payload,
                    "" if self.authed and not self.limited else ", no cluster secret")
        self.transport.abort()

    def _welcome(self, limited: bool) -> None:
        self.authed, self.limited = True, limited
        self._hello_timer.cancel()
        self._hello_timer = None
        self.max_json, self.max_payload = (LIMITED_MAX_JSON, self.server.max_payload if self.server.open_payload
                                           else 0) if limited else (MAX_JSON, self.server.max_payload)
        self.write_frame(b"{}")

    def check_head(self, head: bytearray, payload_len: int) -> bytes | None:
        """A connection without the secret sends a payload only with an open op whose check (the server's
        `open_payload`, a DataNode's write token) allows it: anything else is refused before a byte of it is kept."""
        if not self.limited:
            return None
        try:
            op, req, _ = self.server.decode(head)
            if op not in self.server.open_ops:
                raise errors.Unauthorized(f"rpc op {op!r} needs the cluster secret")
            self.server.open_payload(req, payload_len)
        except errors.DomainError as e:
            return orjson.dumps({"err": type(e).__name__, "msg": e.message, "details": e.details})
        return None

    def frame_received(self, head: bytearray, payload: bytearray) -> None:
        if self.authed:
            asyncio.get_running_loop().create_task(self._handle(head, payload))
            return
        try:
            hello = orjson.loads(head)
        except orjson.JSONDecodeError:
            hello = None
        if not isinstance(hello, dict) or hello.get("op") != "hello":
            hello = {}
        if hello.get("op") == "hello" and not hello.get("secret") and self.server.open_ops:
            self._welcome(limited=True)
        elif hello.get("op") == "hello" and \
                hmac.compare_digest(str(hello.get("secret", "")).encode(), self.server.secret):
            self._welcome(limited=False)
        else:
            self.write_frame(orjson.dumps({"err": "Unauthorized", "msg": "bad cluster secret"}))
            self.transport.close()

    async def _handle(self, raw: bytearray, payload) -> None:
        server = self.server
        out_payload = b""
        op, req = "unknown", None
        try:
            op, req, handler = server.decode(raw)
            series(RPC_CALLS, op).inc()
            if self.limited and op not in server.open_ops:
                raise errors.Unauthorized(f"rpc op {op!r} needs the cluster secret")
            res = await handler(req, payload if payload else b"")
            if isinstance(res, tuple):
                res, out_payload = res
            head = _encode(res)
        except errors.DomainError as e:
            head = orjson.dumps({"err": type(e).__name__, "msg": e.message, "details": e.details})
        except Exception as e:  # a bug: report it to the caller, keep serving
            log.exception("rpc %s failed", op)
            head = orjson.dumps({"err": "DomainError", "msg": f"internal error in {op}: {e!r}"})
        spans = [p for p in out_payload if isinstance(p, FileSpan)] if isinstance(out_payload, list) else []
        try:
            if server.before_reply is not None:
                try:
                    await server.before_reply(req)
                except errors.DomainError as e:  # what the reply would tell never became durable: it is not sent
                    head = orjson.dumps({"err": type(e).__name__, "msg": e.message, "details": e.details})
                    out_payload = b""
            if self.closed:
                return
            if spans and out_payload:
                await self._send_with_spans(_frame(head, out_payload))
                return
            self.write_frame(head, out_payload)
            if self._drained is not None:  # the peer reads slower than we send: wait, so replies don't pile up
                await self.drain()
        except ConnectionError:
            pass  # the peer left mid-reply (a reader cancelled): nothing to tell anyone
        finally:
            for s in spans:
                s.close()

    async def _send_with_spans(self, parts: list) -> None:
        """Send a frame some of whose parts are FileSpans: the parts before each span through the transport, then,
        once the transport has sent all it holds, the span with sendfile(2) on the socket itself. uvloop has no
        loop.sendfile; the connection's replies go one at a time (a client sends its next request only after the
        reply), so nothing else writes to the socket meanwhile."""
        run: list = []
        try:
            for p in parts:
                if not isinstance(p, FileSpan):
                    run.append(p)
                    continue
                if run:
                    self.transport.writelines(run)
                    run = []
                await self._flushed()
                await self._sendfile(p)
        except BaseException:  # the frame can't be completed (cancelled, peer gone, the file failed): nor the
            self.transport.abort()  # connection used again
            raise
        if run:
            self.transport.writelines(run)
        if self._drained is not None:
            await self.drain()

    async def _flushed(self) -> None:
        """Return once the transport's write buffer is empty (it pauses the protocol while it holds anything)."""
        t = self.transport
        if not t.get_write_buffer_size():
            return
        t.set_write_buffer_limits(high=0, low=0)
        try:
            while t.get_write_buffer_size():
                if self._drained is None:
                    await asyncio.sleep(0.001)  # not paused (the transport emptied in between): look again
                else:
                    await self.drain()
        finally:
            t.set_write_buffer_limits()

    async def _sendfile(self, span: FileSpan) -> None:
        """Send `span` on the socket; ConnectionError if the peer goes, stops reading for SEND_STALL_S, or the file
        fails (the caller then aborts the connection: the frame is cut short)."""
        sock = self.transport.get_extra_info("socket").fileno()
        off, left, waiter = span.offset, span.length, None
        loop = asyncio.get_running_loop()
        stalled_at = None
        try:
            while left:
                if self.closed:
                    raise ConnectionError("connection lost while sending")
                try:
                    n = os.sendfile(sock, span.fd, off, left)
                except BlockingIOError:
                    # wait until the socket takes more, watched through a duplicate descriptor (the loop refuses
                    # a second watcher on the transport's own), looking every second whether the transport closed
                    stalled_at = stalled_at or loop.time()
                    if loop.time() - stalled_at > SEND_STALL_S:
                        raise ConnectionError(f"the peer read nothing for {SEND_STALL_S:.0f} s") from None
                    if waiter is None:
                        waiter = os.dup(sock)
                    ready = loop.create_future()
                    loop.add_writer(waiter, lambda: ready.done() or ready.set_result(None))
                    try:
                        await asyncio.wait_for(ready, 1.0)
                    except asyncio.TimeoutError:
                        pass
                    finally:
                        loop.remove_writer(waiter)
                    continue
                except (BrokenPipeError, ConnectionResetError) as e:
                    raise ConnectionError(str(e)) from None
                except OSError as e:  # the file (a disk's read error)
                    log.error("rpc: sendfile from a block file failed after %d of %d bytes: %s; closing the "
                              "connection from %s", span.length - left, span.length, e, self._peer())
                    raise ConnectionError(str(e)) from None
                if n == 0:
                    log.error("rpc: a block file ended %d bytes early; closing the connection from %s", left,
                              self._peer())
                    raise ConnectionError("file ended early")
                off, left, stalled_at = off + n, left - n, None
        finally:
            if waiter is not None:
                os.close(waiter)


class RpcServer:
    """Serves typed handlers: `{RequestType: async def handler(req, payload) -> Reply | (Reply, payload)}`. A request
    is decoded straight into its type (one msgspec decoder over the union of the server's request types); the request
    payload is a bytearray (b"" when empty), a reply payload any bytes-like object or a list of them.
    `before_reply(request)`, if given, is awaited after each handler and before its reply (or error) is written (the
    request is None if it did not decode): the NameNode
    waits there until what the reply could reflect is durable (namenode/ha/journal.py); a DomainError it raises
    (NotLeader) replaces the reply."""

    def __init__(self, handlers: dict[type[Request], Handler], secret: str, *,
                 open_ops: frozenset[str] = frozenset(), max_payload: int = DEFAULT_MAX_PAYLOAD,
                 before_reply: Callable[[Any], Awaitable[None]] | None = None,
                 open_payload: Callable[[Any, int], None] | None = None) -> None:
        self.handlers = handlers
        # open_payload(request, payload_len): raises a DomainError unless a connection without the secret may send
        # this open op's payload (called before the payload is read); without it such connections send none
        self.open_payload = open_payload
        self.before_reply = before_reply
        types = tuple(handlers)
        self._decoder = msgspec.json.Decoder(Union[types] if len(types) > 1 else types[0])
        self.secret = secret.encode()
        self.open_ops = open_ops  # callable after a hello without the secret (the handler checks its own token)
        self.max_payload = max_payload  # the largest request payload, from a peer with the secret
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[_ServerConn] = set()

    def decode(self, raw) -> tuple[str, Any, Handler]:
        """(op name, the request decoded into its type, its handler); InvalidInput for anything else."""
        try:
            req = self._decoder.decode(raw)
        except msgspec.ValidationError as e:
            raise errors.InvalidInput(f"bad rpc request: {e}") from None
        except msgspec.DecodeError as e:
            raise errors.InvalidInput(f"rpc request is not JSON: {e}") from None
        return op_name(type(req)), req, self.handlers[type(req)]

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _ServerConn(self), host, port, reuse_address=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in list(self._conns):
                c.transport.close()
            await self._server.wait_closed()


class _Conn(_FrameProtocol):
    """Client side of one connection: one request at a time, its reply delivered to a future."""

    def __init__(self) -> None:
        super().__init__()
        self._reply: asyncio.Future | None = None

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        _fail(self._reply, ConnectionError(f"connection lost: {exc!r}"))

    def frame_received(self, head: bytearray, payload: bytearray) -> None:
        reply, self._reply = self._reply, None
        if reply is not None and not reply.done():
            reply.set_result((head, payload))

    def send(self, frame: list) -> asyncio.Future:
        self._reply = asyncio.get_running_loop().create_future()
        self.transport.writelines(frame)
        return self._reply

    def time_out(self) -> None:
        """The call under way took too long: it fails with TimeoutError and the connection is dropped."""
        _fail(self._reply, TimeoutError())
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)  # the caller goes on to await its reply, which has the TimeoutError
        self.transport.abort()


def set_liveness(sock: socket.socket, seconds: float) -> None:
    """Make the kernel drop `sock` when its peer has not acknowledged anything for about `seconds`: keepalive probes
    every third of it once the connection is idle for a third, 2 unanswered probes fail it, and TCP_USER_TIMEOUT
    fails it when data sent stays unacknowledged that long (a link down while a request or reply is under way)."""
    step = max(1, round(seconds / 3))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, step)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, step)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(seconds * 1000))


def _fail(fut: asyncio.Future | None, exc: BaseException) -> None:
    """Fail a call's reply future. Its caller may be gone (cancelled mid-call): then nobody awaits it, and asyncio
    would log "Future exception was never retrieved" for an outcome nobody needs, so it is marked retrieved here."""
    if fut is not None and not fut.done():
        fut.set_exception(exc)
        fut.exception()


class _Pool:
    """What both clients keep: the peer, the cluster secret, timeouts and the idle connections."""

    def __init__(self, host: str, port: int, secret: str, *, timeout: float = 30.0, connect_timeout: float = 3.0,
                 max_idle: int = 32, liveness_s: float = 0.0) -> None:
        """`liveness_s` > 0: a connection whose peer's kernel stops answering (host cut off or powered off, no RST)
        fails its call within about that many seconds, however long the call's own timeout (TCP keepalive probes
        and TCP_USER_TIMEOUT: cost nothing per call, and a peer that is merely slow still answers them)."""
        self.host, self.port = host, port
        self.secret = secret
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.liveness_s = liveness_s
        self.max_idle = max_idle
        self._idle: list = []
        # connections with a call under way -> when it began (monotonic), kept once `track_busy()` was called (a
        # NameNode client in HA mode: a NameNode that stops answering is noticed while calls wait on it)
        self._busy: dict | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.host}:{self.port})"


class RpcClient(_Pool):
    """A pool of connections to one peer. `request` raises the peer's DomainError, or Unavailable if it can't be
    reached. Services are called through the typed clients of common/clients.py, which use it."""

    async def _connect(self) -> _Conn:
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await asyncio.get_running_loop().create_connection(_Conn, self.host, self.port)
                if self.liveness_s > 0:
                    set_liveness(conn.transport.get_extra_info("socket"), self.liveness_s)
                head, _ = await conn.send(_request_frame({"op": "hello", "secret": self.secret}, b""))
        except (OSError, ConnectionError, TimeoutError) as e:
            raise errors.Unavailable(f"cannot reach {self.host}:{self.port}: {e!r}") from None
        try:
            _decode_reply(head, dict)
        except errors.DomainError:
            conn.transport.close()
            raise
        return conn

    async def request(self, req: Request, payload=b"", *, timeout: float | None = None):
        """Send one typed request and wait for its reply: (req.Reply, reply payload as a bytearray or b"")."""
        head, out = await self._roundtrip(op_name(type(req)), _request_frame(req, payload), timeout)
        return _decode_reply(head, type(req).Reply), (out if out else b"")

    def track_busy(self) -> None:
        """Keep the calls under way (`busy_since`, `give_up_busy`); off by default (it costs a little per call)."""
        if self._busy is None:
            self._busy = {}

    def busy_since(self) -> float | None:
        """When the oldest call under way began (monotonic), None if none is (or calls are not tracked)."""
        return min(self._busy.values()) if self._busy else None

    def give_up_busy(self) -> int:
        """Fail every call under way as timed out (Unavailable to its caller; its connection is dropped): for a peer
        known to answer none of them. How many there were."""
        if not self._busy:
            return 0
        busy = list(self._busy)
        self._busy.clear()
        for conn in busy:
            conn.time_out()
        return len(busy)

    async def _roundtrip(self, op: str, frame: list, timeout: float | None) -> tuple[bytearray, bytearray]:
        conn = None
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                break
            conn = None
        if conn is None:
            conn = await self._connect()
        # a timer handle rather than asyncio.timeout(): 5 us instead of 13 per call, and calls are the hot path
        timer = asyncio.get_running_loop().call_later(timeout or self.timeout, conn.time_out)
        busy = self._busy
        if busy is not None:
            busy[conn] = time.monotonic()
        try:
            reply = conn.send(frame)
            await conn.drain()
            head, out = await reply
        except (OSError, TimeoutError, ConnectionError) as e:
            conn.transport.close()
            raise errors.Unavailable(f"{op} to {self.host}:{self.port} failed: {e!r}") from None
        except BaseException:
            conn.transport.close()  # cancelled mid-call: the connection is in an unknown state
            raise
        finally:
            timer.cancel()
            if busy is not None:
                busy.pop(conn, None)
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.transport.close()
        return head, out

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().transport.close()


class _TrioConn:
    """One connection of TrioRpcClient: a request is sent, then its reply read in exact-size pieces with recv_into
    (the payload straight into its own buffer, as _FrameProtocol does)."""

    def __init__(self, sock) -> None:
        self.sock = sock

    async def call(self, frame: list) -> tuple[bytearray, bytearray]:
        for buf in frame:
            view = memoryview(buf).cast("B")
            while view:
                view = view[await self.sock.send(view):]
        hdr = await self._recv(bytearray(_HDR.size))
        jl, pl = _HDR.unpack(hdr)
        if jl > MAX_JSON or pl > MAX_PAYLOAD:
            raise ConnectionError(f"frame too large ({jl} + {pl} bytes)")
        head = await self._recv(bytearray(jl))
        return head, await self._recv(payload_buffer(pl))

    async def _recv(self, buf: bytearray) -> bytearray:
        view, pos = memoryview(buf), 0
        while pos < len(buf):
            n = await self.sock.recv_into(view[pos:])
            if not n:
                raise ConnectionError("connection closed by the peer")
            pos += n
        return buf


class TrioRpcClient(_Pool):
    """RpcClient for trio programs: the mount, whose pyfuse3 runs on trio, reads blocks from the DataNodes with it.
    The same frames and pooling over trio sockets; a call that fails on a pooled connection is tried once more on a
    new one, so use it for calls that may be repeated (reads). (A helper thread running RpcClient on asyncio costs
    two thread wake-ups per call: 260-300 us of CPU per call measured on this machine's VM, more than the call.)"""

    async def _connect(self) -> _TrioConn:
        import trio
        sock = trio.socket.socket()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.liveness_s > 0:
            set_liveness(sock, self.liveness_s)
        conn = _TrioConn(sock)
        try:
            with trio.fail_after(self.connect_timeout):
                await sock.connect((self.host, self.port))
                head, _ = await conn.call(_request_frame({"op": "hello", "secret": self.secret}, b""))
        except (OSError, ConnectionError, trio.TooSlowError) as e:
            sock.close()
            raise errors.Unavailable(f"cannot reach {self.host}:{self.port}: {e!r}") from None
        try:
            _decode_reply(head, dict)
        except errors.DomainError:
            sock.close()
            raise
        return conn

    async def request(self, req: Request, payload=b"", *, timeout: float | None = None):
        """As RpcClient.request."""
        head, out = await self._roundtrip(op_name(type(req)), _request_frame(req, payload), timeout)
        return _decode_reply(head, type(req).Reply), (out if out else b"")

    async def _roundtrip(self, op: str, frame: list, timeout: float | None) -> tuple[bytearray, bytearray]:
        import trio
        while True:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            try:
                with trio.fail_after(timeout or self.timeout):
                    head, out = await conn.call(frame)
                break
            except (OSError, ConnectionError) as e:
                conn.sock.close()
                if not reused:  # else the peer closed an idle connection (it restarted, say): try a new one
                    raise errors.Unavailable(f"{op} to {self.host}:{self.port} failed: {e!r}") from None
            except trio.TooSlowError:
                conn.sock.close()
                raise errors.Unavailable(f"{op} to {self.host}:{self.port} timed out") from None
            except BaseException:
                conn.sock.close()  # cancelled mid-call: the connection is in an unknown state
                raise
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.sock.close()
        return head, out

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().sock.close()
