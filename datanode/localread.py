"""The DataNode's side of local reads (common/localread.py): a Unix socket on which a reader on this machine learns
where its reads lie in the block files and gets those files open (SCM_RIGHTS), to read them itself."""
from __future__ import annotations

import array
import asyncio
import hmac
import logging
import os
import socket
import struct
from pathlib import Path

import msgspec

from epochfs.common import errors, localread, readtoken
from epochfs.common import messages as m

from .blockstore import BlockStore
from .metrics import LOCAL_READS

log = logging.getLogger("epochfs.datanode")

MAX_CONNECTIONS = 256  # local readers' connections at once (a gateway pools a few per DataNode, a client as many)


class LocalReadServer:
    """The local socket at `path`, on the DataNode's event loop: a request is answered from the block index and the
    files opened, never a byte of them read here."""

    def __init__(self, store: BlockStore, path: Path, secret: str) -> None:
        self.store = store
        self.path = path
        self.secret = secret
        self.proof = localread.proof(secret)
        self.uid = os.geteuid()
        self.served = 0
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> bool:
        """Listen on `path` (a stale socket there, left by a node killed before, is replaced). False, with a
        warning, if that can't be done: readers then read over RPC."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
            try:
                s.bind(str(self.path))
                os.chmod(self.path, 0o600)
                s.listen(64)
            except BaseException:
                s.close()
                raise
        except OSError as e:
            log.warning("no local reads: can't listen on %s: %s", self.path, e)
            return False
        self._sock = s
        self._spawn(self._accept())
        return True

    async def stop(self) -> None:
        if self._sock is None:
            return
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._sock.close()
        self._sock = None
        try:
            if self.path.exists():
                self.path.unlink()
        except OSError:
            pass

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self._sock)
            conn.setblocking(False)
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid not in (0, self.uid) or len(self._tasks) > MAX_CONNECTIONS:
                conn.close()
                continue
            self._spawn(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                raw = await loop.sock_recv(conn, localread.MAX_REQUEST + 1)
                if not raw:
                    return
                reply, fds = self.answer(raw)
                try:
                    await _send(loop, conn, localread.encode(reply), fds)
                finally:
                    for fd in fds:
                        os.close(fd)
        except OSError:
            pass
        finally:
            conn.close()

    def answer(self, raw: bytes) -> tuple[m.LocalSpans, list[int]]:
        """The reply to one request and the descriptors to pass with it (the caller closes them once sent)."""
        try:
            if len(raw) > localread.MAX_REQUEST:
                raise errors.InvalidInput("request too large")
            req = localread.decode_request(raw)
            if len(req.reads) > localread.MAX_READS:
                raise errors.InvalidInput(f"more than {localread.MAX_READS} reads in one request")
            if req.proof:
                if not hmac.compare_digest(req.proof.encode(), self.proof.encode()):
                    raise errors.Unauthorized("not this cluster's proof")
            elif req.grant is not None:
                readtoken.check(self.secret, req.grant, {r.id for r in req.reads})
            else:
                raise errors.Unauthorized("a local read needs a proof or a read token")
        except msgspec.DecodeError as e:
            return m.LocalSpans(err="InvalidInput", msg=str(e)), []
        except errors.DomainError as e:
            return m.LocalSpans(err=type(e).__name__, msg=e.message), []
        spans: list[m.LocalSpan] = []
        errs: dict[int, m.PieceError] = {}
        fds: list[int] = []
        try:
            for i, r in enumerate(req.reads):
                try:
                    got = self.store.open_local(r.id, max(r.offset, 0), r.length)
                except errors.DomainError as e:
                    errs[i] = m.PieceError(type(e).__name__, e.message)
                    got = None
                if got is None:
                    spans.append(m.LocalSpan(fd=m.REMOTE_SPAN))
                    continue
                fd, at, lo, size, crcs = got
                if fd is None:
                    spans.append(m.LocalSpan(fd=m.ZERO_SPAN, lo=lo, size=size))
                else:
                    spans.append(m.LocalSpan(fd=len(fds), at=at, lo=lo, size=size, crcs=crcs))
                    fds.append(fd)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self.served += len(req.reads) - len(errs)
        LOCAL_READS.inc(len(req.reads) - len(errs))
        return m.LocalSpans(spans=spans, errs=errs, chunk=self.store.chunk_size), fds


async def _send(loop: asyncio.AbstractEventLoop, conn: socket.socket, data: bytes, fds: list[int]) -> None:
    """One message with `fds` passed along, waiting while the socket's buffer is full (asyncio's sock_sendall
    passes no descriptors)."""
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    while True:
        try:
            conn.sendmsg([data], anc)
            return
        except BlockingIOError:
            ready = loop.create_future()
            loop.add_writer(conn.fileno(), lambda: ready.done() or ready.set_result(None))
            try:
                await ready
            finally:
                loop.remove_writer(conn.fileno())
