"""Local reads (common/localread.py, datanode/localread.py): a real BlockStore on RocksDB and block files, its local
socket served from an asyncio loop, and the reader that gets the files passed and reads them itself; the DataNode's
RPC handlers beside it for what falls back."""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile

import pytest

from epochfs.common import errors, localread, messages as m, readtoken
from epochfs.common.blocks import crc32c
from epochfs.common.clients import LOCAL_MIN, DataNodeClient
from epochfs.common.kv import RocksKV
from epochfs.common.rpc import RpcClient, RpcServer
from epochfs.datanode.api import OPEN_OPS, make_handlers
from epochfs.datanode.blockstore import CHUNK_SIZE, BlockStore
from epochfs.datanode.localread import LocalReadServer

S = "s3cret"
CS = CHUNK_SIZE


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A block store with a FILED block (1), a PACKED one (2), a ZEROED one (3), and a block kept in RocksDB (4, a
    second store without files), its local socket in a folder of the test's own."""
    monkeypatch.setenv(localread.ENV_DIR, str(tmp_path / "sock"))
    kv = RocksKV.open(tmp_path / "blocks", bulk=True)
    store = BlockStore(kv, files=tmp_path / "files")
    data = {1: os.urandom(8 * CS + 1000), 2: os.urandom(100_000), 3: bytes(4 << 20)}
    store.put(1, data[1], crc32c(data[1]))
    store.put_many([(2, memoryview(data[2]), crc32c(data[2]), [])])
    store.put(3, data[3], crc32c(data[3]))
    assert store.zeroed(3)
    yield store, data
    kv.close()


def _run(store: BlockStore, body, *, secret: str = S, rpc: bool = False):
    async def go():
        server = LocalReadServer(store, localread.socket_path("127.0.0.1:7"), secret)
        assert await server.start()
        rpc_server = None
        if rpc:
            rpc_server = RpcServer(make_handlers(store, None, lambda c: None, secret=S), S, open_ops=OPEN_OPS)
            await rpc_server.start("127.0.0.1", 0)
        try:
            port = rpc_server._server.sockets[0].getsockname()[1] if rpc_server else 0
            return await body(server, port)
        finally:
            await server.stop()
            if rpc_server:
                await rpc_server.stop()
    return asyncio.run(go())


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_reader_reads_filed_packed_and_zeroed_blocks_itself_whole_and_by_ranges(node):
    store, data = node

    async def body(server, _):
        reader = localread.LocalReader("127.0.0.1:7", proof=localread.proof(S))
        assert oct(os.stat(reader.path).st_mode & 0o777) == "0o600"
        reads = [(1, 0, -1), (1, 7, 3 * CS + 5), (1, 6 * CS, -1), (1, 8 * CS + 999, 10), (2, 0, -1), (2, 99_999, 5),
                 (3, 0, -1), (3, 12345, 1 << 20), (1, 5, 0)]
        before = _open_fds() + 2  # the reader's connection, made on the first call, and the server's end of it
        got = await reader.read([m.BlockRead(*r) for r in reads])
        for (bid, off, n), piece in zip(reads, got):
            end = len(data[bid]) if n < 0 else off + n
            assert bytes(piece) == data[bid][off:end], (bid, off, n)
        assert _open_fds() == before, "the passed descriptors are closed after the reads"
        assert server.served == len(reads) and reader.served == len(reads)
        # 70 reads: two requests (64 at most each, every file a descriptor)
        many = await reader.read([m.BlockRead(1, i * 1000, 1000) for i in range(70)])
        assert [bytes(p) for p in many] == [data[1][i * 1000:(i + 1) * 1000] for i in range(70)]
        reader.close()
    _run(store, body)


def test_what_the_socket_cant_serve_comes_back_as_none_for_the_rpc(node, tmp_path):
    store, data = node
    kv2 = RocksKV.open(tmp_path / "blocks2")
    plain = BlockStore(kv2)  # no files: its blocks live in RocksDB
    plain.put(4, data[2], crc32c(data[2]))

    async def body(server, _):
        reader = localread.LocalReader("127.0.0.1:7", proof=localread.proof(S))
        got = await reader.read([m.BlockRead(1), m.BlockRead(99), m.BlockRead(2)])
        assert bytes(got[0]) == data[1] and got[1] is None and bytes(got[2]) == data[2]
        # a bad copy: one byte of block 1's file changed: the chunk fails its check here, read over RPC instead
        f = next(p for p in store.files.rglob("*") if p.is_file() and p.stat().st_size == len(data[1]))
        with open(f, "r+b") as fh:
            fh.seek(3 * CS + 17)
            fh.write(bytes([data[1][3 * CS + 17] ^ 1]))
        got = await reader.read([m.BlockRead(1, 3 * CS, CS), m.BlockRead(1, 0, CS)])
        assert got[0] is None and bytes(got[1]) == data[1][:CS]
        assert reader.usable(), "a bad copy is the block's problem, not the socket's"
        reader.close()
    _run(store, body)

    async def body2(server, _):
        reader = localread.LocalReader("127.0.0.1:7", proof=localread.proof(S))
        assert await reader.read([m.BlockRead(4)]) == [None]
        reader.close()
    _run(plain, body2)
    kv2.close()


def test_only_this_clusters_readers_are_served(node):
    store, data = node

    async def body(server, _):
        stranger = localread.LocalReader("127.0.0.1:7", proof=localread.proof("another cluster"))
        assert await stranger.read([m.BlockRead(2)]) is None
        assert not stranger.usable(), "refused: its reads go over RPC for a while"
        native = localread.LocalReader("127.0.0.1:7")  # a client without the secret: its read token
        grant = readtoken.issue(S, [1, 2])
        got = await native.read([m.BlockRead(2), m.BlockRead(1, 0, 10)], grant)
        assert bytes(got[0]) == data[2] and bytes(got[1]) == data[1][:10]
        assert await native.read([m.BlockRead(3)], grant) is None, "block 3 is not in the token"
        tokenless = localread.LocalReader("127.0.0.1:7")
        assert await tokenless.read([m.BlockRead(2)]) is None
        assert server.served == 2
        for r in (stranger, native, tokenless):
            r.close()
    _run(store, body)


def test_a_reader_of_another_user_is_refused(node, monkeypatch):
    """The socket is 0600 in a 0700 folder; made reachable for the test, the DataNode still serves only a peer of
    its own user (or root), checked with SO_PEERCRED."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a reader as another user")
    store, data = node
    reachable = tempfile.mkdtemp(prefix="epochfs-localread-")  # pytest's folders are 0700: another user can't pass
    os.chmod(reachable, 0o755)
    monkeypatch.setenv(localread.ENV_DIR, os.path.join(reachable, "sock"))

    async def body(server, _):
        os.chmod(server.path.parent, 0o755)
        os.chmod(server.path, 0o666)
        req = localread.encode(m.LocalRead(reads=[m.BlockRead(2)], proof=localread.proof(S)))
        pid = os.fork()
        if pid == 0:  # the child: plain system calls, then _exit
            code = 3
            try:
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.settimeout(10)
                s.connect(str(server.path))
                try:
                    s.send(req)
                    raw, anc, _, _ = s.recvmsg(65536, 4096)
                    code = 1 if raw or anc else 0
                except ConnectionResetError:  # closed with the request unread
                    code = 0
            finally:
                os._exit(code)
        _, status = await asyncio.get_running_loop().run_in_executor(None, os.waitpid, pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "a peer of another user is answered nothing"
        assert server.served == 0
    try:
        _run(store, body)
    finally:
        shutil.rmtree(reachable)


def test_the_datanode_client_reads_large_calls_locally_and_small_ones_over_rpc(node):
    store, data = node

    async def body(server, port):
        dn = DataNodeClient(RpcClient("127.0.0.1", port, S),
                            localread.LocalReader("127.0.0.1:7", proof=localread.proof(S)))
        assert bytes(await dn.get(1)) == data[1]
        assert server.served == 1
        assert bytes(await dn.get(2, 0, 100_000)) == data[2], "100 KB: over RPC"
        assert server.served == 1 and 100_000 < LOCAL_MIN
        head, payload = await dn.get_many([m.BlockRead(2), m.BlockRead(1, CS, 2 * CS), m.BlockRead(3, 0, 1 << 20)])
        assert head.lens == [100_000, 2 * CS, 1 << 20]
        assert bytes(payload) == data[2] + data[1][CS:3 * CS] + bytes(1 << 20)
        assert server.served == 4
        # a missing block among them: the whole call goes over RPC, which names the error
        head, payload = await dn.get_many([m.BlockRead(1), m.BlockRead(99)])
        assert head.lens == [len(data[1]), -1] and head.errs[1].err == "NoSuchBlock"
        await dn.close()
    _run(store, body, rpc=True)


def test_without_a_socket_reads_go_over_rpc_and_the_socket_is_tried_again_later(node, monkeypatch):
    store, data = node

    async def body(server, port):
        reader = localread.LocalReader("127.0.0.1:8", proof=localread.proof(S))  # nobody listens there
        dn = DataNodeClient(RpcClient("127.0.0.1", port, S), reader)
        assert bytes(await dn.get(1)) == data[1]
        assert not reader.usable() and server.served == 0
        reader.path = server.path
        monkeypatch.setattr(localread, "RETRY_S", 0.0)
        reader._off_until = 0.0
        assert bytes(await dn.get(1)) == data[1] and server.served == 1
        await dn.close()
    _run(store, body, rpc=True)


def test_after_the_datanode_restarts_its_readers_connect_again_at_once(node):
    """A reader's pooled connections die with the DataNode that answered them: the next read connects anew (to the
    restarted node) rather than turning local reads off for RETRY_S."""
    store, data = node

    async def body(server, _):
        reader = localread.LocalReader("127.0.0.1:7", proof=localread.proof(S))
        assert bytes((await reader.read([m.BlockRead(1)]))[0]) == data[1]
        await server.stop()
        again = LocalReadServer(store, server.path, S)
        assert await again.start()
        try:
            assert bytes((await reader.read([m.BlockRead(1)]))[0]) == data[1]
            assert again.served == 1 and reader.usable()
        finally:
            await again.stop()
            reader.close()
    _run(store, body)


def test_a_datanode_that_does_not_answer_is_unavailable_after_the_timeout(tmp_path, monkeypatch):
    """A DataNode stopped or stuck (its socket takes the connection and the request, nothing answers): the read is
    Unavailable after the timeout, as over RPC, so the caller reads another replica; local reads go off for a while."""
    monkeypatch.setenv(localread.ENV_DIR, str(tmp_path))
    path = localread.socket_path("127.0.0.1:9")
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    mute.bind(str(path))
    mute.listen(4)  # never accepts: connects land in the backlog

    async def go():
        reader = localread.LocalReader("127.0.0.1:9", proof=localread.proof(S))
        with pytest.raises(errors.Unavailable, match="did not answer"):
            await asyncio.wait_for(reader.read([m.BlockRead(1)], timeout=0.3), 10)  # (without it: hung)
        assert not reader.usable()
        assert await reader.read([m.BlockRead(1)], timeout=0.3) is None, "off: straight to RPC"
        reader.close()
    try:
        asyncio.run(go())
    finally:
        mute.close()
