"""Issue 18 (hardening), reads: the blocks an object lets go of are deleted only after the free grace, which a
NameNode restart keeps, and block reports don't delete them early; usage follows the namespace at once."""
from __future__ import annotations

from epochfs.common.kv import MemoryKV, RocksKV
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore, now_ns
from epochfs.namenode.posix import Posix
from epochfs.namenode.repair import RepairWorker

S = 1_000_000_000


def test_freed_blocks_wait_out_the_grace_and_a_restart_keeps_them(tmp_path):
    m = MetaStore(RocksKV.open(tmp_path / "meta"), free_grace_s=60)
    m.create_bucket("b", "o")
    m.put_object("b", "k", {"size": 2, "etag": '"e"', "blk": [[10, 1, 0, [1, 2]], [11, 1, 0, [2, 3]]]})
    m.put_object("b", "k", {"size": 1, "etag": '"f"', "blk": [[12, 1, 0, [1, 3]]]})  # overwrite: 10, 11 freed
    assert m.usage(m.bucket_ino("b")) == [1, 1]  # usage counts what the namespace holds, grace or not
    m.delete_object("b", "k")  # 12 freed
    assert m.usage(m.bucket_ino("b")) == [0, 0]
    t = now_ns()
    assert m.release_freed(t) == 0 and m.garbage_count() == 0 and m.freed_count() == 6
    assert m.freed_on() == {1: {10, 12}, 2: {10, 11}, 3: {11, 12}}
    m.kv.close()

    m = MetaStore(RocksKV.open(tmp_path / "meta"), free_grace_s=60)  # a restart: same freed-at times
    assert m.release_freed(t + 30 * S) == 0
    assert m.release_freed(t + 61 * S) == 6 and m.freed_count() == 0
    assert (m.garbage_for(1), m.garbage_for(2), m.garbage_for(3)) == ([10, 12], [10, 11], [11, 12])
    m.kv.close()


def test_a_shorter_grace_after_a_restart_applies_to_blocks_freed_before(tmp_path):
    m = MetaStore(RocksKV.open(tmp_path / "meta"), free_grace_s=600)
    m.create_bucket("b", "o")
    m.put_object("b", "k", {"size": 1, "etag": '"e"', "blk": [[10, 1, 0, [1]]]})
    m.delete_object("b", "k")
    m.kv.close()
    m = MetaStore(RocksKV.open(tmp_path / "meta"), free_grace_s=0)
    assert m.release_freed() == 1 and m.garbage_for(1) == [10]
    m.kv.close()


def test_a_block_report_leaves_copies_in_their_grace_alone():
    m = MetaStore(MemoryKV(), free_grace_s=60)
    m.create_bucket("b", "o")
    m.put_object("b", "k", {"size": 1, "etag": '"e"', "blk": [[10, 1, 0, [1]]]})
    members = Membership(m, timeout_s=10.0)
    members.register("u1", "127.0.0.1", 9001, 0, 10**12, 0)
    m.delete_object("b", "k")
    w = RepairWorker(m, members)
    for _ in range(2):  # two reports agree that node 1 holds block 10, which no file needs
        w.take_report(1, [10])
        w._reconcile()
    assert m.garbage_for(1) == [] and w.totals["surplus_deleted"] == 0


def test_a_posix_commit_frees_through_the_grace_too():
    m = MetaStore(MemoryKV(), free_grace_s=60)
    m.create_bucket("b", "o")
    fs = Posix(m)
    bi = m.bucket_ino("b")
    fs.scope(bi, "mknod", {"parent": bi})
    a = fs.mknod(bi, "f", 0o100644, 0, 0)
    fs.commit(a["ino"], [[20, 1, 0, [1]]], 1, '"e"')
    fs.commit(a["ino"], [[21, 1, 0, [1]]], 1, '"f"')  # the mount's close of a rewrite: block 20 freed
    assert m.garbage_for(1) == [] and m.freed_on() == {1: {20}}
    assert m.release_freed(now_ns() + 61 * S) == 1 and m.garbage_for(1) == [20]


# ---------------------------------------------------------------- times set while a file has unsaved writes
def test_the_writer_commits_an_mtime_set_after_its_last_write(tmp_path):
    from epochfs.frontends.fuse.writer import Writer
    w = Writer(tmp_path, {"etag": '"v1"', "blk": [], "size": 0, "bs": 10})
    w.set_mtime(5)  # nothing unsaved: the NameNode's setattr is all there is to it
    w.wrote(0, 3)
    w.touched()
    assert w.layout()[0].mt is None
    w.set_mtime(1_600_000_000_000_000_000)
    assert w.layout()[0].mt == 1_600_000_000_000_000_000
    w.touched()  # a write after it: the commit's own time again
    assert w.layout()[0].mt is None
    w.set_mtime(7)
    w.committed('"v2"', [[1, 3]], 10)
    assert not w.mtime_set and w.layout()[0].mt is None
    w.file.close()


def test_a_commit_takes_the_mtime_it_is_given():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    fs = Posix(m)
    bi = m.bucket_ino("b")
    fs.scope(bi, "mknod", {"parent": bi})
    a = fs.mknod(bi, "f", 0o100644, 0, 0)
    fs.setattr(a["ino"], {"at": 11, "mt": 12})
    got = fs.commit(a["ino"], [[20, 1, 0, [1]]], 1, '"e"', mt=12)
    assert (got["at"], got["mt"]) == (11, 12) and got["ct"] > 12
    assert fs.commit(a["ino"], [[21, 1, 0, [1]]], 1, '"f"')["mt"] > 12  # without one: the commit's time
