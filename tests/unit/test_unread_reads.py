"""Reads a DataNode sends from its disk unread (sendfile): a real BlockStore on RocksDB and block files, the DataNode's
handlers behind an RpcServer on loopback under uvloop, and the typed client that checks what arrives."""
from __future__ import annotations

import asyncio
import os

import pytest
import uvloop

from epochfs.common import errors, messages as m, readtoken
from epochfs.common.blocks import crc32c
from epochfs.common.clients import DataNodeClient
from epochfs.common.kv import RocksKV
from epochfs.common.rpc import FileSpan, RpcClient, RpcServer
from epochfs.datanode.api import OPEN_OPS, make_handlers
from epochfs.datanode.blockstore import CHUNK_SIZE, UNREAD_MIN, BlockStore

S = "s3cret"
CS = CHUNK_SIZE


def _store(tmp_path):
    kv = RocksKV.open(tmp_path / "blocks", bulk=True)
    return kv, BlockStore(kv, files=tmp_path / "files")


def _files_of_size(store: BlockStore, size: int) -> list:
    """The block files of `size` bytes (the tests' blocks have sizes of their own)."""
    files = [p for p in store.files.rglob("*") if p.is_file() and p.stat().st_size == size]
    assert len(files) == 1
    return files


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_whole_chunks_of_filed_and_packed_blocks_come_unread_with_their_crcs_and_the_rest_is_read(tmp_path):
    kv, s = _store(tmp_path)
    big = os.urandom(8 * CS + 1000)  # a file of its own; its last chunk short
    small = os.urandom(100_000)  # in a pack
    s.put(1, big, crc32c(big))
    s.put_many([(2, memoryview(small), crc32c(small), [])])
    before = _open_fds()
    for bid, data, off, n in [(1, big, 0, -1), (1, big, 2 * CS, 3 * CS), (1, big, 6 * CS, -1), (2, small, 0, -1)]:
        parts, crcs = s.read_unread(bid, off, n)
        end = len(data) if n < 0 else off + n
        assert len(parts) == 1 and isinstance(parts[0], FileSpan) and len(parts[0]) == end - off
        span = parts[0]
        got = os.pread(span.fd, span.length, span.offset)
        span.close()
        assert got == data[off:end]
        assert crcs == [crc32c(got[k:k + CS]) for k in range(0, len(got), CS)]
    assert _open_fds() == before
    # not from a chunk boundary, not to one (nor to the end), or too small: read and checked here, as before
    for off, n in [(10, 3 * CS), (CS, CS + 5), (0, UNREAD_MIN - 1)]:
        parts, crcs = s.read_unread(1, off, n)
        assert crcs is None and b"".join(bytes(p) for p in parts) == big[off:off + n]
    files = _files_of_size(s, len(big))
    with open(files[0], "r+b") as f:
        f.truncate(5 * CS)
    with pytest.raises(errors.CorruptBlock, match="short"):
        s.read_unread(1)
    assert _open_fds() == before, "the file is closed when it can't be sent"
    files[0].unlink()
    with pytest.raises(errors.NoSuchBlock):
        s.read_unread(1)
    kv.close()


def test_reads_sent_unread_arrive_whole_and_a_bad_copy_is_found_by_the_reader(tmp_path, monkeypatch):
    waits = []
    real_dup = os.dup
    monkeypatch.setattr("epochfs.common.rpc.os.dup", lambda fd: waits.append(fd) or real_dup(fd))
    kv, store = _store(tmp_path)
    big = os.urandom(32 << 20)  # larger than a loopback socket takes at once: the send waits for room
    other = os.urandom(3 * CS)
    store.put(1, big, crc32c(big))
    store.put(2, other, crc32c(other))

    async def go():
        server = RpcServer(make_handlers(store, None, lambda c: None, secret=S), S, open_ops=OPEN_OPS)
        await server.start("127.0.0.1", 0)
        port = server._server.sockets[0].getsockname()[1]
        dn = DataNodeClient(RpcClient("127.0.0.1", port, S))
        native = DataNodeClient(RpcClient("127.0.0.1", port, ""))
        try:
            grant = readtoken.issue(S, [1, 2])
            assert await dn.get(1) == big
            assert waits, "the socket was full at times: the send waited for room"
            head, data = await native.read_tokened([m.BlockRead(2)], grant)
            assert bytes(data) == other and head.unchecked
            before = _open_fds()  # with both connections made
            assert await dn.get(1, 4 * CS, 4 * CS) == big[4 * CS:8 * CS]
            # a piece read and sent from memory (unaligned, 5 MiB: the transport still holds some of it) before
            # pieces sent unread, and a missing block's error between them
            reads = [m.BlockRead(1, 7, 5 << 20), m.BlockRead(2), m.BlockRead(99), m.BlockRead(1)]
            head, data = await dn.get_many(reads)
            assert head.lens == [5 << 20, len(other), -1, len(big)] and head.errs[2].err == "NoSuchBlock"
            assert set(head.unchecked) == {1, 3} and head.chunk == CS
            assert bytes(data) == big[7:7 + (5 << 20)] + other + big
            assert _open_fds() == before, "every file sent is closed"

            files = _files_of_size(store, len(big))
            raw = bytearray(files[0].read_bytes())
            raw[9 * CS + 3] ^= 1  # rot in chunk 9 of block 1
            files[0].write_bytes(bytes(raw))
            with pytest.raises(errors.CorruptBlock):
                await dn.get(1)  # the reader's check fails; the node, asked to check itself, finds its copy bad
            assert await dn.get(1, 0, 8 * CS) == big[:8 * CS], "chunks before the rot still read"
            head, data = await dn.get_many([m.BlockRead(2), m.BlockRead(1), m.BlockRead(1, 0, CS)])
            assert head.lens == [len(other), -1, CS] and head.errs[1].err == "CorruptBlock"
            assert bytes(data) == other + big[:CS] and not head.unchecked
            head, data = await native.read_tokened([m.BlockRead(1), m.BlockRead(2)], grant)
            assert head.lens == [-1, len(other)] and bytes(data) == other
            assert 1 in store.bad, "a tokened read's bad copy is noted for the heartbeat"
            assert _open_fds() == before
        finally:
            await dn.close()
            await native.close()
            await server.stop()

    uvloop.run(go())
    kv.close()


async def _serve_and_ask(store):
    """A DataNode's handlers served on loopback and a raw connection that said hello and asked for all of block 1
    and reads nothing yet: (server, its port, the open-fd count before the connection, reader, writer)."""
    server = RpcServer(make_handlers(store, None, lambda c: None, secret=S), S)
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]
    before = _open_fds()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for frame in (b'{"op":"hello","secret":"s3cret"}', b'{"op":"get","block_id":1}'):
        writer.write(len(frame).to_bytes(4, "big") + bytes(4) + frame)
    return server, port, before, reader, writer


def test_a_reader_that_leaves_mid_send_leaves_no_file_open(tmp_path):
    kv, store = _store(tmp_path)
    big = os.urandom(32 << 20)
    store.put(1, big, crc32c(big))

    async def go():
        server, port, before, reader, writer = await _serve_and_ask(store)
        await reader.readexactly(8 + 2)  # the hello's answer
        await reader.readexactly(1 << 20)  # some of the reply, then gone
        writer.transport.abort()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if _open_fds() <= before:
                break
        assert _open_fds() <= before
        dn = DataNodeClient(RpcClient("127.0.0.1", port, S))
        assert await dn.get(1) == big, "the server goes on serving"
        await dn.close()
        await server.stop()

    uvloop.run(go())
    kv.close()


def test_a_reader_that_stops_reading_is_cut_off_and_a_file_cut_short_mid_send_fails_the_read(tmp_path, monkeypatch):
    monkeypatch.setattr("epochfs.common.rpc.SEND_STALL_S", 0.5)
    kv, store = _store(tmp_path)
    big = os.urandom(32 << 20)
    store.put(1, big, crc32c(big))
    file = _files_of_size(store, len(big))[0]

    async def go():
        server, port, before, reader, writer = await _serve_and_ask(store)
        for _ in range(200):  # reads nothing: once the sockets' buffers are full, the server gives up on it
            await asyncio.sleep(0.1)
            if not server._conns:
                break
        assert len(server._conns) == 0, "the connection was cut"
        got = 0
        try:
            while chunk := await reader.read(1 << 20):
                got += len(chunk)
        except ConnectionError:
            pass
        assert got < 8 + 2 + len(big), "the reply was cut short, not completed"
        writer.close()
        assert _open_fds() <= before + 1  # the file was closed (the client's own socket may linger)

        real = store.read_unread

        def cut(*a, **kw):  # the file loses its tail between the reply's head and its bytes
            out = real(*a, **kw)
            os.truncate(file, 20 << 20)
            return out
        monkeypatch.setattr(store, "read_unread", cut)
        dn = DataNodeClient(RpcClient("127.0.0.1", port, S))
        with pytest.raises(errors.Unavailable):
            await dn.get(1)
        await dn.close()
        await server.stop()

    uvloop.run(go())
    kv.close()
