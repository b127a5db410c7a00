"""The NameNode's DataNode, POSIX and batch calls as typed messages, over a real RPC server on loopback: each
request decodes into its type, each answer into its reply type, and a request the types refuse never reaches a
handler."""
import asyncio
import stat

import pytest

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient
from epochfs.common.kv import MemoryKV
from epochfs.common.rpc import RpcClient, RpcServer
from epochfs.namenode.api import batch, nodes, posix
from epochfs.namenode.ha.journal import LocalJournal
from epochfs.namenode.jobs import OperatorJobs
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore
from epochfs.namenode.posix import Posix
from epochfs.namenode.repair import RepairWorker

SECRET = "s3cret"


def run(test):
    """Serve the handlers of a fresh namespace (buckets "a" and "b") and run `test(client, meta)`."""
    async def main():
        meta = MetaStore(MemoryKV())
        meta.create_bucket("a", "o")
        meta.create_bucket("b", "o")
        members = Membership(meta, timeout_s=10.0)
        repair = RepairWorker(meta, members)
        journal = meta.journal = LocalJournal(meta.kv, meta)
        handlers = nodes.handlers(meta, members, repair, OperatorJobs(meta, members, repair), journal) | \
            posix.handlers(meta, members, lambda bucket, blocks: repair.admit(blocks, 1)) | batch.handlers(meta, members)
        server = RpcServer(handlers, SECRET, before_reply=lambda req: journal.durable(meta.seq))
        await server.start("127.0.0.1", 0)
        port = server._server.sockets[0].getsockname()[1]
        client = NameNodeClient(RpcClient("127.0.0.1", port, SECRET))
        try:
            await test(client, meta)
        finally:
            await client.close()
            await server.stop()
    asyncio.run(main())


def test_register_heartbeat_and_the_delete_order_riding_on_it():
    async def t(nn: NameNodeClient, meta: MetaStore):
        assert (await nn.heartbeat(m.Heartbeat(node_id=7))).reregister  # unknown: must register first
        nid = (await nn.register(m.Register(uuid="u1", host="127.0.0.1", rpc_port=9001, capacity=1 << 30))).node_id
        assert nid == (await nn.register(m.Register(uuid="u1", host="127.0.0.1", rpc_port=9001))).node_id  # same uuid
        meta.put_object("a", "k", {"size": 3, "etag": '"e"', "blk": [[11, 3, 0, [nid]]]})
        meta.free_grace_s = 0.0  # the freed block is garbage at once (no reader to wait for)
        meta.delete_object("a", "k")
        orders = await nn.heartbeat(m.Heartbeat(node_id=nid, used=3, extra=m.ReplicationLag(queued=2),
                                                report=[11], scrub=None))
        assert not orders.reregister and orders.copy == [] and orders.scrub is None
        assert orders.delete.blocks == [11]
        again = await nn.heartbeat(m.Heartbeat(node_id=nid, deleted=[11]))
        assert again.delete is None
    run(t)


def test_posix_operations_are_typed_and_scoped_to_their_bucket():
    async def t(nn: NameNodeClient, meta: MetaStore):
        a, b = meta.bucket_ino("a"), meta.bucket_ino("b")
        d = await nn.fs_mkdir(m.FsMkdir(parent=a, name="d", mode=0o750, uid=7, gid=8, bi=a))
        assert isinstance(d, m.InodeAttr) and stat.S_ISDIR(d.mode) and (d.uid, d.gid) == (7, 8)
        f = await nn.fs_mknod(m.FsMknod(parent=d.ino, name="f", mode=stat.S_IFREG | 0o600, uid=7, gid=8, bi=a,
                                        bucket="a"))
        assert (await nn.fs_lookup(m.FsLookup(parent=d.ino, name="f", bi=a))) == f
        page = await nn.fs_readdir(m.FsReaddir(ino=d.ino, bi=a))
        assert [(e.name, e.attr.ino) for e in page.entries] == [("f", f.ino)] and page.next is None
        await nn.fs_setxattr(m.FsSetxattr(ino=f.ino, name="user.k", value="v", bi=a))
        assert (await nn.fs_getxattr(m.FsGetxattr(ino=f.ino, name="user.k", bi=a))).value == "v"
        attr = await nn.fs_setattr(m.FsSetattr(ino=f.ino, fields=m.AttrChanges(mode=0o644), bi=a, bucket="a"))
        assert stat.S_IMODE(attr.mode) == 0o644 and attr.uid == 7  # only the mode changed
        with pytest.raises(errors.Unauthorized):  # an inode of bucket "a" named in a call scoped to "b"
            await nn.fs_getattr(m.FsGetattr(ino=f.ino, bi=b))
        with pytest.raises(errors.InvalidInput):  # the types refuse it before any handler runs
            await nn.fs_getattr(m.FsGetattr(ino=-1, bi=a))
    run(t)


def test_a_posix_commit_keeps_named_blocks_and_answers_the_new_layout():
    async def t(nn: NameNodeClient, meta: MetaStore):
        a = meta.bucket_ino("a")
        f = await nn.fs_mknod(m.FsMknod(parent=a, name="f", mode=stat.S_IFREG | 0o644, uid=0, gid=0, bi=a))
        new = [m.WrittenBlock(21, 4, 0, (1,)), m.WrittenBlock(22, 2, 0, (1,))]
        one = await nn.fs_commit(m.FsCommit(ino=f.ino, blk=new, size=6, etag='"x"', bi=a))
        assert one.size == 6 and one.layout == [m.BlockSpan(21, 4), m.BlockSpan(22, 2)]
        layout = await nn.fs_layout(m.FsLayout(ino=f.ino, bi=a))
        assert layout.etag == '"x"' and layout.blk == one.layout
        two = await nn.fs_commit(m.FsCommit(ino=f.ino, blk=[21, m.WrittenBlock(23, 1, 0, (1,))], size=5, etag='"y"',
                                            base='"x"', bi=a))
        assert two.layout == [m.BlockSpan(21, 4), m.BlockSpan(23, 1)]
        got = await nn.fs_blocks(f.ino, a)
        assert [(x.id, x.nodes) for x in got.blk] == [(21, (1,)), (23, (1,))] and got.etag == '"y"'
        with pytest.raises(errors.PreconditionFailed):  # made from a version that is gone
            await nn.fs_commit(m.FsCommit(ino=f.ino, blk=[21], size=4, etag='"z"', base='"x"', bi=a))
    run(t)


def test_stat_many_answers_each_key_or_why_not_and_manifest_pages():
    async def t(nn: NameNodeClient, meta: MetaStore):
        for i in range(3):
            meta.put_object("a", f"k{i}", {"size": 1, "etag": f'"e{i}"', "mt": 5, "blk": [[30 + i, 1, 9, [1]]]})
        res = await nn.stat_many([("a", "k1"), ("a", "nope"), ("zz", "k1")])
        assert res.objs[0].blk == [m.BlockRef(31, 1, 9, (1,))] and res.objs[0].etag == '"e1"'
        assert [o.error for o in res.objs] == ["", "NoSuchKey", "NoSuchBucket"]
        page = await nn.manifest("a", limit=2)
        assert [i.key for i in page.items] == ["k0", "k1"] and page.truncated
        page = await nn.manifest("a", after="k1")
        assert page.items == [m.ManifestItem("k2", 1, '"e2"', 5)] and not page.truncated
    run(t)


def test_dirs_answer_names_and_attributes_of_many_directories_in_one_call():
    """FsDirs (a write-back mount's renewal): each directory's attributes as getattr gives them and its names from
    the entries ("/" ended: a subdirectory, with its inode); a directory gone, a file or an inode of another bucket
    is an entry without attributes, not a failed call; more names than asked for come back as None."""
    async def t(nn: NameNodeClient, meta: MetaStore):
        a, b = meta.bucket_ino("a"), meta.bucket_ino("b")
        d = await nn.fs_mkdir(m.FsMkdir(parent=a, name="d", mode=0o750, uid=7, gid=8, bi=a))
        sub = await nn.fs_mkdir(m.FsMkdir(parent=d.ino, name="s", mode=0o755, uid=7, gid=8, bi=a))
        f = await nn.fs_mknod(m.FsMknod(parent=d.ino, name="f", mode=stat.S_IFREG | 0o600, uid=7, gid=8, bi=a,
                                        bucket="a"))
        other = await nn.fs_mkdir(m.FsMkdir(parent=b, name="o", mode=0o755, uid=0, gid=0, bi=b))
        got = (await nn.fs_dirs(m.FsDirs(inos=[d.ino, sub.ino, f.ino, other.ino, 10**9], bi=a))).dirs
        assert [x.ino for x in got] == [d.ino, sub.ino, f.ino, other.ino, 10**9]
        assert got[0].attr == await nn.fs_getattr(m.FsGetattr(ino=d.ino, bi=a))  # nlink 3: one subdirectory
        assert got[0].attr.nlink == 3
        assert (got[0].names, got[0].inos) == (["f", "s/"], [f.ino, sub.ino])
        assert (got[1].names, got[1].inos) == ([], [])
        assert [x.attr for x in got[2:]] == [None, None, None]
        fs = Posix(meta)
        fs.scope(a, "dirs", {})
        (ino, attr, names, inos), = fs.dirs([d.ino], max_names=1)  # more than that: no names, the attributes
        assert (names, inos) == (None, None) and attr["nlink"] == 3
        with pytest.raises(errors.Unauthorized):  # the tree of buckets has no directories to renew
            await nn.fs_dirs(m.FsDirs(inos=[d.ino], bi=None))
        with pytest.raises(errors.InvalidInput):  # at most 256 at once
            await nn.fs_dirs(m.FsDirs(inos=list(range(257)), bi=a))
    run(t)
