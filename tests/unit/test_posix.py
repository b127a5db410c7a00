"""POSIX operations by inode on an in-memory namespace, and what S3 sees of their results."""
import errno
import stat

import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV
from epochfs.frontends import errmap
from epochfs.namenode import posix as posix_mod
from epochfs.namenode.metastore import MetaStore
from epochfs.namenode.posix import RENAME_EXCHANGE, RENAME_NOREPLACE, Posix


@pytest.fixture
def fs():
    m = MetaStore(MemoryKV())
    m.create_bucket("bkt", "owner")
    p = Posix(m)
    p.b = m.bucket_ino("bkt")
    return p


def keys(fs):
    return [i[1] for i in fs.meta.list_objects("bkt")["items"]]


def errno_of(fn, *args, **kw) -> int:
    with pytest.raises(errors.DomainError) as e:
        fn(*args, **kw)
    return errmap.to_errno(e.value)  # the mount's one table from domain errors to errnos


def test_create_and_list_through_both_views(fs):
    d = fs.mkdir(fs.b, "d", 0o750, 7, 8)
    assert stat.S_ISDIR(d["mode"]) and stat.S_IMODE(d["mode"]) == 0o750 and (d["uid"], d["gid"]) == (7, 8)
    f = fs.mknod(d["ino"], "f", stat.S_IFREG | 0o600, 7, 8)
    fs.symlink(d["ino"], "l", "f", 7, 8)
    fs.mknod(d["ino"], "p", stat.S_IFIFO | 0o644, 7, 8)
    assert [n for n, _ in fs.readdir(d["ino"])["entries"]] == ["f", "l", "p"]
    assert fs.lookup(d["ino"], "f")["ino"] == f["ino"]
    assert keys(fs) == ["d/", "d/f"]  # no symlink or FIFO through S3
    assert fs.meta.stat("bkt", "d/f")["size"] == 0
    assert errno_of(fs.mkdir, d["ino"], "f", 0o755, 0, 0) == errno.EEXIST
    assert errno_of(fs.lookup, d["ino"], "x" * 256) == errno.ENAMETOOLONG
    assert errno_of(fs.rmdir, fs.b, "d") == errno.ENOTEMPTY
    assert errno_of(fs.mkdir, 1, "newbucket", 0o755, 0, 0) == errno.EPERM


def test_commit_and_hard_links_refresh_every_listing_entry(fs):
    f = fs.mknod(fs.b, "a", stat.S_IFREG | 0o644, 0, 0)
    fs.link(f["ino"], fs.b, "b")
    assert fs.getattr(f["ino"])["nlink"] == 2
    fs.commit(f["ino"], [], 0, '"e2"')
    assert [(i[1], i[3]) for i in fs.meta.list_objects("bkt")["items"]] == [("a", '"e2"'), ("b", '"e2"')]
    fs.unlink(fs.b, "a")
    assert fs.getattr(f["ino"])["nlink"] == 1 and keys(fs) == ["b"]


def test_rename_moves_a_directory_in_one_entry(fs):
    a = fs.mkdir(fs.b, "a", 0o755, 0, 0)
    sub = fs.mkdir(a["ino"], "sub", 0o755, 0, 0)
    fs.mknod(sub["ino"], "f", stat.S_IFREG | 0o644, 0, 0)
    assert fs.getattr(a["ino"])["nlink"] == 3  # ".", its name, and sub's ".."
    fs.rename(fs.b, "a", fs.b, "z")
    assert keys(fs) == ["z/", "z/sub/", "z/sub/f"]
    g = fs.mknod(fs.b, "g", stat.S_IFREG | 0o644, 0, 0)
    assert errno_of(fs.rename, fs.b, "g", fs.b, "z") == errno.EISDIR
    assert errno_of(fs.rename, fs.b, "z", fs.b, "g") == errno.ENOTDIR
    assert errno_of(fs.rename, fs.b, "g", fs.b, "z", RENAME_NOREPLACE) == errno.EEXIST
    fs.rename(fs.b, "g", fs.b, "z", RENAME_EXCHANGE)
    assert fs.lookup(fs.b, "z")["ino"] == g["ino"] and fs.lookup(fs.b, "g")["ino"] == a["ino"]
    for flags in (4, RENAME_NOREPLACE | RENAME_EXCHANGE):  # RENAME_WHITEOUT; both at once
        assert errno_of(fs.rename, fs.b, "z", fs.b, "w", flags) == errno.EINVAL
    assert fs.lookup(fs.b, "z")["ino"] == g["ino"] and errno_of(fs.lookup, fs.b, "w") == errno.ENOENT


def test_replaced_file_stays_readable_by_inode_until_reaped(fs, monkeypatch):
    old = fs.mknod(fs.b, "cur", stat.S_IFREG | 0o644, 0, 0)
    new = fs.mknod(fs.b, "tmp", stat.S_IFREG | 0o644, 0, 0)
    fs.rename(fs.b, "tmp", fs.b, "cur")
    assert fs.getattr(old["ino"])["nlink"] == 0  # open handles may still read it
    monkeypatch.setattr(posix_mod, "ORPHAN_GRACE_S", 0.0)
    fs.unlink(fs.b, "cur")  # any later unlink reaps expired orphans
    assert errno_of(fs.getattr, old["ino"]) == errno.ENOENT
    assert fs.getattr(new["ino"])["nlink"] == 0


def test_orphans_past_their_grace_are_reaped_and_none_is_passed_over(fs, monkeypatch):
    """The reaper scans from where it stopped last (the freed orphans' deleted keys made each unlink slower): an
    orphan made while the clock was behind that point, and one after a failed command, are freed all the same."""
    s = 1_000_000_000
    clock = [1_000_000 * s]
    monkeypatch.setattr(posix_mod, "now_ns", lambda: clock[0])
    f = [fs.mknod(fs.b, f"f{i}", stat.S_IFREG | 0o644, 0, 0)["ino"] for i in range(5)]
    fs.unlink(fs.b, "f0")
    clock[0] += 100 * s
    fs.unlink(fs.b, "f1")  # f0's grace is over
    assert errno_of(fs.getattr, f[0]) == errno.ENOENT and fs.getattr(f[1])["nlink"] == 0
    clock[0] -= 300 * s  # the clock went back: f2's orphan key lies before where the reaper stopped
    fs.unlink(fs.b, "f2")
    clock[0] += 1000 * s
    fs.unlink(fs.b, "f3")
    assert [errno_of(fs.getattr, ino) for ino in f[1:3]] == [errno.ENOENT] * 2
    assert fs.getattr(f[3])["nlink"] == 0
    assert errno_of(fs.unlink, fs.b, "missing") == errno.ENOENT  # a failed command: the reaper starts over
    clock[0] += 1000 * s
    fs.unlink(fs.b, "f4")
    assert errno_of(fs.getattr, f[3]) == errno.ENOENT and fs.getattr(f[4])["nlink"] == 0


def test_a_large_directory_counts_its_links_as_one(fs):
    """nlink 2 + subdirectories while a directory is small; 1 ("not counted", as btrfs always answers and find reads
    it) from DIR_NLINK_SCAN entries on, so a getattr of a large directory scans no more than that."""
    d = fs.mkdir(fs.b, "d", 0o755, 0, 0)["ino"]
    fs.mkdir(d, "sub", 0o755, 0, 0)
    assert fs.getattr(d)["nlink"] == 3
    for i in range(posix_mod.DIR_NLINK_SCAN):
        fs.mknod(d, f"f{i}", stat.S_IFREG | 0o644, 0, 0)
    assert fs.getattr(d)["nlink"] == 1


def test_setattr_and_truncate(fs):
    f = fs.mknod(fs.b, "f", stat.S_IFREG | 0o644, 0, 0)
    fs.commit(f["ino"], [[7, 10, 0, [1]]], 10, '"x"')
    a = fs.setattr(f["ino"], {"mode": 0o4711, "uid": 5, "at": 1, "mt": 2})
    assert (a["mode"], a["uid"], a["at"], a["mt"]) == (stat.S_IFREG | 0o4711, 5, 1, 2)
    assert fs.setattr(f["ino"], {"size": 0})["size"] == 0
    assert errno_of(fs.setattr, f["ino"], {"size": 3}) == errno.EINVAL


def test_bucket_usage_follows_mount_changes(fs):
    """What S3 would count (regular files, one object per name) stays in step, and a quota gives EDQUOT."""
    f = fs.mknod(fs.b, "f", stat.S_IFREG | 0o644, 0, 0, bucket="bkt")
    fs.mknod(fs.b, "p", stat.S_IFIFO | 0o644, 0, 0, bucket="bkt")
    fs.commit(f["ino"], [[7, 10, 0, [1]]], 10, '"x"', bucket="bkt")
    fs.link(f["ino"], fs.b, "g", bucket="bkt")
    assert fs.meta.usage(fs.b) == [20, 2]
    h = fs.mknod(fs.b, "h", stat.S_IFREG | 0o644, 0, 0, bucket="bkt")
    fs.rename(fs.b, "h", fs.b, "g", bucket="bkt")  # g's name (10 bytes) goes, h's empty file takes it
    assert fs.meta.usage(fs.b) == [10, 2]
    fs.unlink(fs.b, "f", bucket="bkt")
    assert fs.meta.usage(fs.b) == [0, 1]
    fs.meta.update_bucket("bkt", {"qb": 5})
    assert errno_of(fs.commit, h["ino"], [[8, 6, 0, [1]]], 6, '"y"', bucket="bkt") == errno.EDQUOT
    assert fs.getattr(h["ino"])["size"] == 0


def test_scope_keeps_each_bucket_to_its_own_inodes(fs):
    """Directories made through S3 carry no bucket until the mount finds them; files lie where their names are; an
    inode of another bucket is refused, also for hard links and renames into it."""
    fs.meta.put_object("bkt", "s3dir/obj", {"size": 1, "etag": '"x"', "blk": []})
    fs.meta.create_bucket("other", "someone")
    other = fs.meta.bucket_ino("other")
    fs.scope(fs.b, "lookup", {"parent": fs.b})
    d = fs.lookup(fs.b, "s3dir")["ino"]
    fs.scope(fs.b, "readdir", {"ino": d})
    f = fs.readdir(d)["entries"][0][1]["ino"]
    fs.scope(fs.b, "getattr", {"ino": f})
    fs.scope(fs.b, "mkdir", {"parent": d})
    sub = fs.mkdir(d, "sub", 0o755, 0, 0)["ino"]
    fs.scope(fs.b, "rename", {"parent": d, "newparent": sub})
    fs.rename(d, "obj", sub, "moved")
    fs.scope(fs.b, "getattr", {"ino": f})  # its name moved with it

    for op, args in (("getattr", {"ino": f}), ("readdir", {"ino": d}), ("lookup", {"parent": 1, "name": "bkt"}),
                     ("link", {"ino": f, "parent": other, "name": "x"}),
                     ("rename", {"parent": sub, "name": "moved", "newparent": other, "newname": "x"})):
        assert errno_of(fs.scope, other, op, args) == errno.EACCES
    assert errno_of(fs.scope, None, "getattr", {"ino": f}) == errno.EACCES
    assert errno_of(fs.scope, None, "lookup", {"parent": 1, "name": "bkt"}) == errno.EACCES
    fs.scope(None, "readdir", {"ino": 1})


def test_xattrs_follow_linux_rules_and_share_the_s3_metadata_store(fs):
    f = fs.mknod(fs.b, "f", stat.S_IFREG | 0o644, 0, 0)["ino"]
    fs.setxattr(f, "user.color", "blue")
    fs.setxattr(f, "user.bin", "\x00\xff\n")  # binary: kept with the inode, not shown to S3
    fs.setxattr(f, "trusted.t", "x")
    assert fs.getxattr(f, "user.bin") == "\x00\xff\n"
    assert sorted(fs.listxattr(f)) == ["trusted.t", "user.bin", "user.color"]
    assert fs.meta.stat("bkt", "f")["meta"] == {"color": "blue"}
    assert errno_of(fs.setxattr, f, "user.color", "red", posix_mod.XATTR_CREATE) == errno.EEXIST
    assert errno_of(fs.setxattr, f, "user.none", "v", posix_mod.XATTR_REPLACE) == errno.ENODATA
    fs.setxattr(f, "user.color", "red", posix_mod.XATTR_REPLACE)
    assert fs.getxattr(f, "user.color") == "red"
    assert errno_of(fs.getxattr, f, "user.none") == errno.ENODATA
    assert errno_of(fs.getxattr, f, "user." + "n" * 251) == errno.ERANGE
    assert errno_of(fs.setxattr, f, "user.big", "v" * (64 * 1024 + 1)) == errno.E2BIG
    assert errno_of(fs.setxattr, f, "security.selinux", "v") == errno.EOPNOTSUPP
    assert errno_of(fs.getxattr, f, "system.posix_acl_access") == errno.EOPNOTSUPP
    assert errno_of(fs.setxattr, f, "user.", "v") == errno.EINVAL
    assert errno_of(fs.setxattr, f, "user.\u20ac", "v") == errno.EINVAL  # not latin-1 text: no byte string
    for i in range(3):
        fs.setxattr(f, f"user.big{i}", "v" * (64 * 1024))
    assert errno_of(fs.setxattr, f, "user.big3", "v" * (64 * 1024)) == errno.ENOSPC
    for i in range(3):
        fs.removexattr(f, f"user.big{i}")
    fs.removexattr(f, "user.color")
    assert errno_of(fs.removexattr, f, "user.color") == errno.ENODATA
    assert fs.meta.stat("bkt", "f")["meta"] == {}

    fs.meta.put_object("bkt", "s3obj", {"size": 0, "etag": '"e"', "blk": [], "meta": {"k": "v"}})
    s3obj = fs.lookup(fs.b, "s3obj")["ino"]
    assert fs.listxattr(s3obj) == ["user.k"] and fs.getxattr(s3obj, "user.k") == "v"

    link = fs.symlink(fs.b, "l", "f", 0, 0)["ino"]
    assert errno_of(fs.setxattr, link, "user.a", "v") == errno.EPERM
    assert errno_of(fs.getxattr, link, "user.a") == errno.ENODATA
    fs.setxattr(link, "trusted.a", "v")
    d = fs.mkdir(fs.b, "d", 0o755, 0, 0)["ino"]
    fs.setxattr(d, "user.a", "v")
    assert fs.meta.stat("bkt", "d/")["meta"] == {"a": "v"}  # the directory's marker object

    fs.link(f, fs.b, "g")
    fs.rename(fs.b, "f", d, "moved")
    assert fs.getxattr(fs.lookup(fs.b, "g")["ino"], "user.bin") == "\x00\xff\n"


def test_s3_delete_and_overwrite_of_one_hard_link_keep_the_others(fs):
    f = fs.mknod(fs.b, "a", stat.S_IFREG | 0o644, 0, 0, bucket="bkt")["ino"]
    fs.commit(f, [[7, 10, 0, [1]]], 10, '"old"', bucket="bkt")
    fs.link(f, fs.b, "b", bucket="bkt")
    fs.link(f, fs.b, "c", bucket="bkt")
    assert fs.meta.delete_object("bkt", "a")["existed"]
    assert fs.getattr(f)["nlink"] == 2 and fs.meta.stat("bkt", "b")["blk"] == [[7, 10, 0, [1]]]
    assert fs.meta.garbage_for(1) == [] and keys(fs) == ["b", "c"]
    assert fs.meta.usage(fs.b) == [20, 2]

    fs.meta.put_object("bkt", "b", {"size": 3, "etag": '"new"', "blk": [[8, 3, 0, [1]]]})
    assert fs.meta.stat("bkt", "b")["ino"] != f and fs.meta.stat("bkt", "c")["etag"] == '"old"'
    assert fs.getattr(f)["nlink"] == 1 and fs.meta.garbage_for(1) == []
    assert fs.meta.usage(fs.b) == [13, 2]

    fs.meta.delete_object("bkt", "c")  # the last name: now the blocks go
    assert fs.meta.garbage_for(1) == [7] and fs.meta.get_inode(f) is None


def test_s3_delete_of_one_hard_link_in_a_versioned_bucket_leaves_a_marker_for_that_key(fs):
    f = fs.mknod(fs.b, "a", stat.S_IFREG | 0o644, 0, 0)["ino"]
    fs.commit(f, [[7, 10, 0, [1]]], 10, '"old"')
    fs.link(f, fs.b, "b")
    fs.meta.update_bucket("bkt", {"ver": "Enabled"})
    res = fs.meta.delete_object("bkt", "a")
    assert res["dm"] and res["vid"]
    assert keys(fs) == ["b"] and fs.getattr(f)["nlink"] == 1 and fs.meta.garbage_for(1) == []
    assert [v[1] for v in fs.meta.list_versions("bkt")["items"]] == ["a", "b"]


def test_commit_keeps_blocks_of_the_version_it_started_from(fs):
    """A commit may keep blocks of the file's current version by id (a write into part of a large file); blocks
    of other files, a stale base version and sizes that don't add up are refused, and nothing changes."""
    f = fs.mknod(fs.b, "f", stat.S_IFREG | 0o644, 0, 0)["ino"]
    g = fs.mknod(fs.b, "g", stat.S_IFREG | 0o644, 0, 0)["ino"]
    fs.commit(f, [[1, 4, 0, [1]], [2, 4, 0, [1]], [3, 2, 0, [1]]], 10, '"v1"')
    fs.commit(g, [[9, 4, 0, [1]]], 4, '"g1"')
    assert errno_of(fs.commit, f, [9, 2, 3], 10, '"v2"', base='"v1"') == errno.EINVAL      # g's block
    assert errno_of(fs.commit, f, [1, [5, 4, 0, [1]], 3], 10, '"v2"', base='"v0"') == errno.ESTALE
    assert errno_of(fs.commit, f, [1, [5, 3, 0, [1]], 3], 10, '"v2"', base='"v1"') == errno.EINVAL
    assert errno_of(fs.commit, f, [1, 2], 10, '"v2"') == errno.EINVAL  # ids only with a base version
    assert errno_of(fs.commit, f, [1, 1, 3], 10, '"v2"', base='"v1"') == errno.EINVAL  # one block, twice
    assert fs.layout(f) == {"blk": [[1, 4], [2, 4], [3, 2]], "size": 10, "etag": '"v1"'}
    a = fs.commit(f, [1, [5, 4, 0, [1]], 3, [6, 1, 0, [1]]], 11, '"v2"', base='"v1"')
    assert (a["size"], a["etag"], a["layout"]) == (11, '"v2"', [[1, 4], [5, 4], [3, 2], [6, 1]])
    assert fs.meta.garbage_for(1) == [2]  # only the replaced block is freed


def _new_file(ino, parent, name, size=0, mode=0o640, mt=1_500_000_000_000_000_000, fs=None):
    """A batch create's item; with `size`, one block allocated in `fs` (pending, as a gateway's would be)."""
    blk = [[fs.meta.allocate(1, lambda bid, i: [1])[0][0], size, 0, [1]]] if size else []
    return {"f": {"ino": ino, "parent": parent, "name": name, "mode": mode, "uid": 7, "gid": 8, "at": mt, "mt": mt,
                  "size": size},
            "blk": blk, "etag": f'"e{ino}"'}


def test_create_files_makes_each_file_whole_or_not_at_all(fs):
    """A batch create (the mount's write-back): reserved inode numbers, content, mode, owner and mtime as given; a
    name taken (also twice in one batch), a number not reserved or used, a size its blocks don't add up to, or the
    quota is that file's error, and nothing of it is made; the others are, and usage counts them."""
    fs.scope(fs.b, "create", {})  # as the handler does: the request's bucket
    fs.mknod(fs.b, "taken", stat.S_IFREG | 0o644, 0, 0, bucket="bkt")
    first = fs.reserve_inodes(4)
    assert fs.reserve_inodes(1) == first + 4  # never handed out twice, nor by mknod
    bad_size = _new_file(first + 3, fs.b, "bad", 5, fs=fs)
    bad_size["f"]["size"] = 6
    a10 = _new_file(first, fs.b, "a", 10, fs=fs)
    res = fs.create_files([a10, _new_file(first + 1, fs.b, "taken"),
                           _new_file(first + 1, fs.b, "a"), _new_file(first + 100, fs.b, "unreserved"),
                           _new_file(first, fs.b, "again"), bad_size, _new_file(first + 2, fs.b, "b")],
                          bucket="bkt")
    assert [type(r).__name__ if isinstance(r, errors.DomainError) else r["ino"] for r in res] == \
        [first, "AlreadyExists", "AlreadyExists", "InvalidInput", "InvalidInput", "InvalidInput", first + 2]
    a = fs.getattr(first)
    assert (a["size"], stat.S_IMODE(a["mode"]), a["uid"], a["gid"], a["mt"]) == (10, 0o640, 7, 8,
                                                                                 1_500_000_000_000_000_000)
    assert res[0]["layout"] == [[a10["blk"][0][0], 10]]
    assert sorted(keys(fs)) == ["a", "b", "taken"]
    assert fs.meta.usage(fs.b) == [10, 3]
    fs.meta.update_bucket("bkt", {"qb": 15})
    more = fs.reserve_inodes(2)
    res = fs.create_files([_new_file(more, fs.b, "c", 5, fs=fs), _new_file(more + 1, fs.b, "d", 1, fs=fs)],
                          bucket="bkt")
    assert res[0]["size"] == 5 and errmap.to_errno(res[1]) == errno.EDQUOT
    assert sorted(keys(fs)) == ["a", "b", "c", "taken"] and fs.meta.usage(fs.b) == [15, 4]


def test_a_create_sent_again_answers_as_the_first_time_and_gives_its_new_blocks_back(fs):
    """A batch create whose answer was lost is sent again: by the gateway's NameNode client with the same blocks,
    or by the mount with its content stored again (new blocks). Each file it made already is answered as the first
    time (its attributes and first layout), nothing is made twice and the first blocks stay; the new blocks become
    garbage. Once the file changed (here a chmod) it is no longer that create: refused, as a taken number is."""
    fs.scope(fs.b, "create", {})
    first = fs.reserve_inodes(3, owner="AK")
    (b1, _), (b2, _), (b3, _) = fs.meta.allocate(3, lambda bid, i: [1])

    def item(ino, name, bid):
        it = _new_file(ino, fs.b, name)
        it["f"]["size"], it["blk"] = 10, [[bid, 10, 0, [1]]]
        return it
    made = fs.create_files([item(first, "a", b1), item(first + 1, "b", b2)], bucket="bkt", owner="AK")
    assert [r["ino"] for r in made] == [first, first + 1]
    same = fs.create_files([item(first, "a", b1), item(first + 1, "b", b2)], bucket="bkt", owner="AK")
    assert same == made and fs.meta.garbage_for(1) == []
    anew = fs.create_files([item(first, "a", b3), item(first + 2, "c", b3)], bucket="bkt", owner="AK")
    assert anew[0] == made[0] and anew[0]["layout"] == [[b1, 10]]
    assert type(anew[1]).__name__ == "InvalidInput"  # b3 was taken back by the first item, not stored twice
    assert fs.meta.garbage_for(1) == [b3] and sorted(keys(fs)) == ["a", "b"]
    assert fs.meta.usage(fs.b) == [20, 2]
    (b4, _), = fs.meta.allocate(1, lambda bid, i: [1])
    fs.meta.abandon([b4])  # given back (or expired): its copies are garbage, no file may take it
    late = fs.create_files([item(first + 2, "d", b4)], bucket="bkt", owner="AK")
    assert type(late[0]).__name__ == "InvalidInput" and sorted(keys(fs)) == ["a", "b"]
    fs.setattr(first, {"mode": 0o600})
    changed = fs.create_files([item(first, "a", b1)], bucket="bkt", owner="AK")
    assert type(changed[0]).__name__ == "InvalidInput" and stat.S_IMODE(fs.getattr(first)["mode"]) == 0o600


def test_reserved_inode_numbers_are_their_owners_alone(fs):
    """Inode numbers reserved by one access key can't be taken by another's batch create, nor can a number below
    the counter that was never reserved (a deleted file's); the range's record goes once all of it is used."""
    fs.scope(fs.b, "create", {})
    gone = fs.mknod(fs.b, "gone", stat.S_IFREG | 0o644, 0, 0, bucket="bkt")["ino"]
    fs.unlink(fs.b, "gone")
    mine = fs.reserve_inodes(2, owner="AK-MINE")
    theirs = fs.create_files([_new_file(mine, fs.b, "stolen"), _new_file(gone, fs.b, "reused")], bucket="bkt",
                             owner="AK-OTHER")
    assert [type(r).__name__ for r in theirs] == ["InvalidInput", "InvalidInput"]
    assert "another access key" in theirs[0].message
    assert [r["ino"] for r in fs.create_files([_new_file(mine, fs.b, "a")], bucket="bkt", owner="AK-MINE")] == [mine]
    assert len(list(fs.meta.kv.scan(b"R", b"S"))) == 1  # one number of the two left
    assert [r["ino"] for r in fs.create_files([_new_file(mine + 1, fs.b, "b")], bucket="bkt",
                                              owner="AK-MINE")] == [mine + 1]
    assert list(fs.meta.kv.scan(b"R", b"S")) == []  # all used: the record is gone
    again = fs.create_files([_new_file(mine + 1, fs.b, "c")], bucket="bkt", owner="AK-MINE")
    assert type(again[0]).__name__ == "InvalidInput" and sorted(keys(fs)) == ["a", "b"]


def test_a_commit_sets_the_attributes_held_with_it(fs):
    """chmod/chown/atime held by the mount until the commit (an archiver's per-file fchown+fchmod) are set by the
    commit itself, as a setattr would (the file type kept, ctime the commit's); only those fields."""
    f = fs.mknod(fs.b, "held", stat.S_IFREG | 0o600, 0, 0)["ino"]
    a = fs.commit(f, [[7, 10, 0, [1]]], 10, '"x"', mt=1_400_000_000_000_000_000,
                  held={"mode": 0o640, "uid": 1234, "gid": 5678, "at": 1_300_000_000_000_000_000})
    assert (a["mode"], a["uid"], a["gid"], a["at"], a["mt"]) == (stat.S_IFREG | 0o640, 1234, 5678,
                                                                 1_300_000_000_000_000_000, 1_400_000_000_000_000_000)
    assert fs.getattr(f) == {k: v for k, v in a.items() if k != "layout"}
    assert errno_of(fs.commit, f, [[8, 10, 0, [1]]], 10, '"y"', held={"size": 0}) == errno.EINVAL
    assert fs.getattr(f)["etag"] == '"x"'
