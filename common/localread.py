"""Local reads: a reader on a DataNode's machine reads the block files itself (as HDFS's short-circuit reads do).

Over RPC every byte a DataNode serves is copied by the kernel from its file into a socket (sendfile) and out of the
socket into the reader, and each read is a request on the DataNode's event loop. A DataNode also listens on a Unix
socket (SOCK_SEQPACKET, one message per request and per reply); a reader on the same machine asks it where its reads
lie and gets the open files with the answer (SCM_RIGHTS), then reads them with one pread per read and checks each
chunk's CRC32C itself, as it checks the chunks an RPC reply sends unread. A descriptor keeps its file readable however
the DataNode moves or deletes the block meanwhile (a block's file is never written again in place: a rewrite makes a
new file, a pack is compacted into another), so a read gets the bytes that were stored when it asked, whole.

Who may: the socket is made mode 0600 and the DataNode serves only a peer of its own user or root (SO_PEERCRED): a
process that can connect could read the DataNode's files anyway. Each request also shows it comes from the same
cluster (the gateway's proof, derived from the cluster secret, or a native client's read token, checked as for
read_tokened), so a DataNode of another cluster that took the same address never answers with its blocks.

The socket's path follows from the DataNode's address (`socket_path`): a reader needs nothing but the address it
already has. Anything the local path can't serve (no socket: another machine or a DataNode without it; a block kept
in RocksDB; an error; a chunk failing its check) returns None, and the caller reads it over RPC, which also reports
bad copies for repair.

Measured on this 2-core machine, one 4 MiB block read by one client: 0.53-0.54 ms of the reader's CPU and 0.13 of the
DataNode's, against 1.27-1.44 and 1.20-1.43 over RPC; the benchmarks' figures are in the README ("Local reads")."""
from __future__ import annotations

import array
import hashlib
import logging
import os
import socket
import time
from pathlib import Path

import anyio
import msgspec

from . import errors
from . import messages as m
from .blocks import crc32c, zeros
from .config import parse_addr
from .rpc import payload_buffer
from .worker import in_thread

log = logging.getLogger("epochfs.localread")

MAX_READS = 64  # reads per request: each passes a descriptor, and a message carries at most 253 (SCM_MAX_FD)
MAX_REQUEST = 256 << 10  # bytes of a request (a read token lists its blocks); a larger one goes over RPC
MAX_REPLY = 64 << 10  # a reply of MAX_READS spans with the CRCs of 4 MiB blocks' 16 chunks: ~6 KiB
MAX_IDLE = 8  # connections a reader keeps open between calls (one per call in flight; the rest are closed)
RETRY_S = 30.0  # after the socket failed, reads go over RPC for this long before it is tried again
ENV_DIR = "EPOCHFS_LOCAL_DIR"
ENV_OFF = "EPOCHFS_LOCAL_READS"  # "0": readers never use the local path

_encode = msgspec.msgpack.Encoder().encode
_decode_request = msgspec.msgpack.Decoder(m.LocalRead).decode
_decode_reply = msgspec.msgpack.Decoder(m.LocalSpans).decode


def local_dir() -> Path:
    """The folder of this machine's DataNode sockets: EPOCHFS_LOCAL_DIR, else /run/epochfs for root, else the
    user's runtime folder (or /tmp/epochfs-<uid>): a DataNode and its readers of one user find the same one."""
    d = os.environ.get(ENV_DIR)
    if d:
        return Path(d)
    uid = os.geteuid()
    if uid == 0:
        return Path("/run/epochfs")
    run = os.environ.get("XDG_RUNTIME_DIR")
    return Path(run) / "epochfs" if run else Path(f"/tmp/epochfs-{uid}")


def socket_path(addr: str) -> Path:
    """The local socket of the DataNode whose RPC address is `addr` ("host:port")."""
    host, port = parse_addr(addr)
    return local_dir() / f"dn-{host}-{port}.sock"


def proof(secret: str) -> str:
    """What a gateway shows with its local reads: derived from the cluster secret, never revealing it."""
    return hashlib.sha256(b"epochfs local read\0" + secret.encode()).hexdigest()


def enabled() -> bool:
    return os.environ.get(ENV_OFF, "1").lower() not in ("0", "false", "no", "off")


def encode(msg) -> bytes:
    return _encode(msg)


def decode_request(raw: bytes) -> m.LocalRead:
    return _decode_request(raw)


class LocalReader:
    """Reads from the DataNode at `addr` through its local socket, from asyncio or trio (a pool of connections).

    The exchange with the DataNode waits on the event loop (no thread), and so do the preads of bytes in the page
    cache (RWF_NOWAIT); only those that would wait for the disk go to a worker thread. A thread for every read cost
    the gateway more than the RPC it replaces for 128 KiB objects (`s3_bench.py`'s GET 128K: 0.55 against 0.32 ms
    of gateway CPU per GET), the thread hop alone ~0.11 ms."""

    def __init__(self, addr: str, *, proof: str = "", path: Path | None = None) -> None:
        self.path = path or socket_path(addr)
        self.proof = proof
        self._idle: list[socket.socket] = []
        self._off_until = 0.0
        self.served = 0  # reads served locally (tests, benchmarks)

    def usable(self) -> bool:
        return time.monotonic() >= self._off_until

    async def read(self, reads: list[m.BlockRead], grant: m.ReadGrant | None = None, *,
                   timeout: float = 30.0) -> list | None:
        """Each read's bytes (checked against their CRC32Cs), or None for a read this node can't serve locally; None
        instead of the list when the local socket can't be used (all go over RPC). A DataNode that does not answer
        within `timeout` (stopped, or its event loop stuck) is Unavailable, as over RPC: the caller reads another
        replica."""
        if not self.usable():
            return None
        out: list = []
        for i in range(0, len(reads), MAX_READS):
            try:
                with anyio.fail_after(timeout):
                    part = await self._request(reads[i:i + MAX_READS], grant)
            except TimeoutError:
                self._off("no answer")
                raise errors.Unavailable(f"DataNode at {self.path} did not answer a local read in {timeout:g} s") \
                    from None
            if part is None:
                return None
            out += part
        self.served += sum(1 for x in out if x is not None)
        return out

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for s in idle:
            s.close()

    def _off(self, why) -> None:
        if self.usable():
            log.info("local reads from %s off for %.0f s: %s", self.path, RETRY_S, why)
        self._off_until = time.monotonic() + RETRY_S

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
        try:
            s.connect(str(self.path))  # a Unix socket connects at once, or fails (EAGAIN: its backlog is full)
        except BaseException:
            s.close()
            raise
        return s

    async def _request(self, reads: list[m.BlockRead], grant: m.ReadGrant | None) -> list | None:
        req = encode(m.LocalRead(reads=reads, proof=self.proof, grant=None if self.proof else grant))
        if len(req) > MAX_REQUEST:
            return None
        while True:
            pooled = bool(self._idle)
            try:
                sock = self._idle.pop() if pooled else self._connect()
            except OSError as e:  # no socket here (another machine), nobody listening, not ours to use
                self._off(e)
                return None
            fds: list[int] = []
            ok = False
            try:
                reply = await _exchange(sock, req, len(reads), fds)
                ok = True
            except (OSError, ValueError, msgspec.DecodeError) as e:
                if pooled and isinstance(e, (ConnectionError, _Closed)):
                    self.close()  # the DataNode restarted since: its old connections are all gone; a new one
                    continue
                self._off(e)
                return None
            finally:
                if ok and len(self._idle) < MAX_IDLE:
                    self._idle.append(sock)
                else:  # failed, or cancelled while the reply was on its way: the connection is not reusable
                    sock.close()
                if not ok:
                    _close_all(fds)
            break
        try:
            return await _pieces(reads, reply, fds)
        except ValueError as e:
            self._off(e)
            return None
        finally:
            _close_all(fds)


class _Closed(ConnectionError):
    """The DataNode's end of the connection is closed (it stopped, or restarted)."""


async def _exchange(sock: socket.socket, req: bytes, n: int, fds: list[int]) -> m.LocalSpans:
    """One request and its reply, the descriptors passed with it appended to `fds`."""
    try:
        sock.send(req)  # one small message into an empty buffer (the last reply was read): never waits
    except (BrokenPipeError, ConnectionResetError) as e:
        raise _Closed(str(e)) from None
    while True:
        try:
            raw, anc, flags, _ = sock.recvmsg(MAX_REPLY, socket.CMSG_SPACE(MAX_READS * 4))
            break
        except BlockingIOError:
            await anyio.wait_readable(sock)
        except ConnectionResetError as e:
            raise _Closed(str(e)) from None
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            fds += a
    if not raw:
        raise _Closed("the DataNode closed the connection")
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        raise ConnectionError("a cut reply")
    reply = _decode_reply(raw)
    if reply.err:
        raise ValueError(f"{reply.err}: {reply.msg}")
    if len(reply.spans) != n or reply.chunk <= 0 and any(s.fd >= 0 for s in reply.spans):
        raise ValueError("a reply that does not match its request")
    return reply


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


async def _pieces(reads: list[m.BlockRead], reply: m.LocalSpans, fds: list[int]) -> list:
    """Each read's bytes: read from the page cache here, the rest (bytes on the disk) in one worker thread."""
    out: list = []
    cold: list[tuple[int, memoryview, int, int]] = []  # (fd, the buffer's unread rest, where in the file, index)
    for i, (r, span) in enumerate(zip(reads, reply.spans)):
        if i in reply.errs or span.fd == m.REMOTE_SPAN:
            out.append(None)
            continue
        start = r.offset - span.lo
        end = span.size if r.length < 0 else min(span.size, start + r.length)
        if start < 0 or end < start:
            raise ValueError("a span that does not hold its read")
        if span.fd == m.ZERO_SPAN:
            out.append(zeros(end - start))
            continue
        if span.fd >= len(fds) or len(span.crcs) != -(-span.size // reply.chunk):
            raise ValueError("a span without its file or its CRCs")
        buf = memoryview(payload_buffer(span.size))
        out.append(buf)
        got = _pread_cached(fds[span.fd], buf, span.at)
        if got < span.size:
            cold.append((fds[span.fd], buf[got:], span.at + got, i))
    if cold:
        for i in await in_thread(_pread_all, cold):
            out[i] = None  # the file is short: a bad copy (read over RPC, which finds it so and has it repaired)
    for i, (r, span) in enumerate(zip(reads, reply.spans)):
        buf = out[i]
        if buf is None or span.fd < 0:
            continue
        cs = reply.chunk
        if any(crc32c(buf[k * cs:(k + 1) * cs]) != crc for k, crc in enumerate(span.crcs)):
            out[i] = None
            continue
        start = r.offset - span.lo
        end = span.size if r.length < 0 else min(span.size, start + r.length)
        if (start, end) != (0, span.size):
            out[i] = buf[start:end]
    return out


def _pread_cached(fd: int, buf: memoryview, at: int) -> int:
    """Bytes read into `buf` from `at` without waiting for the disk (RWF_NOWAIT): those already in the page cache."""
    got = 0
    while got < len(buf):
        try:
            n = os.preadv(fd, [buf[got:]], at + got, os.RWF_NOWAIT)
        except BlockingIOError:
            break
        except OSError:  # RWF_NOWAIT refused (an old kernel, a file system without it): the thread reads it
            break
        if n <= 0:
            break
        got += n
    return got


def _pread_all(todo: list[tuple[int, memoryview, int, int]]) -> list[int]:
    """Fill each buffer from its file (in a worker thread: this waits for the disk): the indexes of those whose file
    ended first or could not be read."""
    short = []
    for fd, buf, at, i in todo:
        got = 0
        while got < len(buf):
            try:
                n = os.preadv(fd, [buf[got:]], at + got)
            except OSError:  # the disk's read error: over RPC, the DataNode finds its copy bad
                n = 0
            if n <= 0:
                short.append(i)
                break
            got += n
    return short
