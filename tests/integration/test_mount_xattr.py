"""Extended attributes through the mount (user.* of a file are its S3 metadata), and S3 writes and deletes of one
name of a hard-linked file: only that key changes, the other names keep the inode and its content."""
from __future__ import annotations

import asyncio
import errno
import os
import time

import pytest

from cluster import ALT, MAIN
from epochfs.common import errors
from epochfs.common.client import S3Client
from epochfs.frontends import errmap
from mounting import fs_requests, needs_fuse

pytestmark = [pytest.mark.integration, needs_fuse]


def _eventually(pred, timeout: float = 10.0) -> bool:
    """pred() turns true once the kernel's attribute and entry caches (0.5 s here) expire."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _errno(fn, *args, **kw) -> int:
    with pytest.raises(OSError) as e:
        fn(*args, **kw)
    return e.value.errno


def _as_uid(uid: int, fn) -> int:
    """fn() in a forked child running as uid and gid `uid`: the errno of the OSError it raised, or 0. The child
    works on descriptors opened here, since pytest's temporary directories are closed to other users."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            fn()
        except OSError as e:
            code = e.errno
        except BaseException:
            code = 255
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_xattrs_on_files_directories_and_symlinks(mnt, s3, bucket):
    f = mnt.path / "f.txt"
    f.write_bytes(b"data")
    os.setxattr(f, "user.color", b"blue")
    os.setxattr(f, "user.blob", bytes(range(256)) * 16)  # binary, 4 KiB: kept with the inode, not as S3 metadata
    assert os.getxattr(f, "user.color") == b"blue"
    assert os.getxattr(f, "user.blob") == bytes(range(256)) * 16
    assert sorted(os.listxattr(f)) == ["user.blob", "user.color"]
    assert s3.head_object(Bucket=bucket, Key="f.txt")["Metadata"] == {"color": "blue"}

    assert _errno(os.setxattr, f, "user.color", b"red", os.XATTR_CREATE) == errno.EEXIST
    assert _errno(os.setxattr, f, "user.none", b"x", os.XATTR_REPLACE) == errno.ENODATA
    os.setxattr(f, "user.color", b"red", os.XATTR_REPLACE)
    assert os.getxattr(f, "user.color") == b"red"
    assert _errno(os.getxattr, f, "user.none") == errno.ENODATA
    assert _errno(os.getxattr, f, "user." + "n" * 251) == errno.ERANGE
    assert _errno(os.setxattr, f, "user.big", b"v" * (64 * 1024 + 1)) == errno.E2BIG
    os.setxattr(f, "user.max", b"v" * (64 * 1024))
    assert len(os.getxattr(f, "user.max")) == 64 * 1024
    assert _errno(os.setxattr, f, "security.x", b"v") == errno.EOPNOTSUPP
    os.removexattr(f, "user.max")
    os.removexattr(f, "user.color")
    assert _errno(os.removexattr, f, "user.color") == errno.ENODATA
    assert s3.head_object(Bucket=bucket, Key="f.txt")["Metadata"] == {}
    assert f.read_bytes() == b"data"  # the content and its ETag are untouched

    d = mnt.path / "d"
    d.mkdir()
    os.setxattr(d, "user.owner", b"team-a")
    assert os.getxattr(d, "user.owner") == b"team-a"
    os.symlink("f.txt", mnt.path / "ln")
    assert _errno(os.setxattr, mnt.path / "ln", "user.x", b"v", follow_symlinks=False) == errno.EPERM
    os.setxattr(mnt.path / "ln", "trusted.x", b"v", follow_symlinks=False)  # root only, allowed on symlinks
    assert os.listxattr(mnt.path / "ln", follow_symlinks=False) == ["trusted.x"]
    assert os.getxattr(mnt.path / "ln", "user.blob") == bytes(range(256)) * 16  # followed to f.txt


def test_s3_metadata_is_the_user_namespace(mnt, s3, bucket):
    """One store: x-amz-meta-* written through S3 read as user.*, and an S3 overwrite replaces them."""
    s3.put_object(Bucket=bucket, Key="s3.bin", Body=b"x", Metadata={"label": "cat", "split": "train"})
    f = mnt.path / "s3.bin"
    assert sorted(os.listxattr(f)) == ["user.label", "user.split"]
    assert os.getxattr(f, "user.label") == b"cat"
    os.setxattr(f, "user.split", b"val")
    assert s3.head_object(Bucket=bucket, Key="s3.bin")["Metadata"] == {"label": "cat", "split": "val"}
    s3.put_object(Bucket=bucket, Key="s3.bin", Body=b"y", Metadata={"label": "dog"})
    assert os.listxattr(f) == ["user.label"]  # attributes are not cached by the kernel
    assert os.getxattr(f, "user.label") == b"dog"


def test_xattrs_belong_to_the_inode(mnt, s3, bucket):
    """They follow renames and hard links, and go with the last name."""
    f = mnt.path / "a"
    f.write_bytes(b"1")
    os.setxattr(f, "user.k", b"v")
    os.link(f, mnt.path / "b")
    assert os.getxattr(mnt.path / "b", "user.k") == b"v"
    (mnt.path / "sub").mkdir()
    os.rename(f, mnt.path / "sub" / "moved")
    assert os.getxattr(mnt.path / "sub" / "moved", "user.k") == b"v"
    os.setxattr(mnt.path / "b", "user.k2", b"\x00\x01")
    assert sorted(os.listxattr(mnt.path / "sub" / "moved")) == ["user.k", "user.k2"]
    assert s3.head_object(Bucket=bucket, Key="sub/moved")["Metadata"] == {"k": "v"}
    os.unlink(mnt.path / "b")
    os.unlink(mnt.path / "sub" / "moved")
    (mnt.path / "a").write_bytes(b"2")  # a new file under the old name starts without attributes
    assert os.listxattr(mnt.path / "a") == []


def test_only_writers_set_user_xattrs(mnt):
    """With default_permissions the kernel asks for write permission (Linux's rule for user.*); trusted.* needs
    CAP_SYS_ADMIN and is not listed to others."""
    f = mnt.path / "mine"
    f.write_bytes(b"x")
    os.chmod(f, 0o644)
    os.setxattr(f, "user.k", b"v")
    os.setxattr(f, "trusted.k", b"v")
    fd = os.open(f, os.O_RDONLY)
    try:
        def reads():
            assert os.getxattr(fd, "user.k") == b"v" and os.listxattr(fd) == ["user.k"]
        assert _as_uid(4321, reads) == 0
        assert _as_uid(4321, lambda: os.setxattr(fd, "user.k", b"w")) == errno.EACCES
        assert _as_uid(4321, lambda: os.removexattr(fd, "user.k")) == errno.EACCES
        assert _as_uid(4321, lambda: os.getxattr(fd, "trusted.k")) == errno.ENODATA
        os.chmod(f, 0o666)  # writable by all: anyone may set user.* (ownership matters in sticky directories)
        assert _as_uid(4321, lambda: os.setxattr(fd, "user.k", b"w")) == 0
    finally:
        os.close(fd)
    assert os.getxattr(f, "user.k") == b"w"


def test_s3_delete_of_one_hard_link_keeps_the_others(mnt, s3, bucket, cluster):
    data = os.urandom(100_000)
    (mnt.path / "a").write_bytes(data)
    os.link(mnt.path / "a", mnt.path / "b")
    os.link(mnt.path / "a", mnt.path / "c")
    ino = os.stat(mnt.path / "a").st_ino
    blocks = [blk.id for blk in cluster.nn.stat(bucket, "a").obj.blocks]

    s3.delete_object(Bucket=bucket, Key="a")
    assert s3.get_object(Bucket=bucket, Key="b")["Body"].read() == data
    res = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "b"}]})
    assert [d["Key"] for d in res["Deleted"]] == ["b"]
    assert _eventually(lambda: os.stat(mnt.path / "c").st_nlink == 1)
    assert os.stat(mnt.path / "c").st_ino == ino and (mnt.path / "c").read_bytes() == data
    assert sorted(os.listdir(mnt.path)) == ["c"]
    cluster.collect_garbage()
    assert all(set(blocks) <= held for held in cluster.datanode_blocks().values())  # no copy was dropped

    s3.delete_object(Bucket=bucket, Key="c")  # the last name: the blocks go
    cluster.collect_garbage()
    assert all(not set(blocks) & held for held in cluster.datanode_blocks().values())


def test_s3_overwrite_of_one_hard_link_leaves_the_others_the_old_content(mnt, s3, bucket):
    (mnt.path / "a").write_bytes(b"old content")
    os.link(mnt.path / "a", mnt.path / "b")
    os.link(mnt.path / "a", mnt.path / "c")
    s3.put_object(Bucket=bucket, Key="a", Body=b"new content")
    s3.copy_object(Bucket=bucket, Key="b", CopySource={"Bucket": bucket, "Key": "a"})
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"old content"
    assert (mnt.path / "c").read_bytes() == b"old content"
    for name in ("a", "b"):
        assert s3.get_object(Bucket=bucket, Key=name)["Body"].read() == b"new content"
    assert _eventually(lambda: len({os.stat(mnt.path / n).st_ino for n in "abc"}) == 3)  # once entries expire
    assert [os.stat(mnt.path / n).st_nlink for n in "abc"] == [1, 1, 1]
    assert (mnt.path / "a").read_bytes() == b"new content"


def test_writes_ask_the_gateway_for_no_attributes(mnt, cluster):
    """The kernel looks up security.capability before every write() call: the mount answers it itself."""
    with open(mnt.path / "w", "wb", buffering=0) as f:
        before = fs_requests(cluster)
        for _ in range(50):
            f.write(b"x" * 100)
        after = fs_requests(cluster)
    assert after.get("getxattr", 0) == before.get("getxattr", 0)
    assert _errno(os.getxattr, mnt.path / "w", "security.capability") == errno.EOPNOTSUPP


def test_xattr_calls_need_read_or_write_on_the_bucket(cluster, s3, bucket):
    """Reading attributes needs read permission on the bucket, changing them write, like the other calls."""
    s3.put_object(Bucket=bucket, Key="f", Body=b"x", Metadata={"k": "v"})
    def run(user, call):
        async def go():
            async with S3Client(cluster.endpoint, user[0], user[1]) as c:
                return await call(c)
        return asyncio.run(go())

    root = run(MAIN, lambda c: c.fs_lookup(bucket, parent=1, name=bucket))["ino"]
    ino = run(MAIN, lambda c: c.fs_lookup(bucket, parent=root, name="f"))["ino"]
    calls = {"getxattr": lambda c: c.fs_getxattr(bucket, ino=ino, name="user.k"),
             "listxattr": lambda c: c.fs_listxattr(bucket, ino=ino),
             "setxattr": lambda c: c.fs_setxattr(bucket, ino=ino, name="user.k", value="w"),
             "removexattr": lambda c: c.fs_removexattr(bucket, ino=ino, name="user.k")}

    def denied(op: str) -> bool:
        try:
            run(ALT, calls[op])
        except errors.Unauthorized as e:
            return errmap.to_errno(e) == errno.EACCES
        return False

    assert all(denied(op) for op in calls)
    s3.put_bucket_acl(Bucket=bucket, GrantRead=f"id={ALT[2]}")
    assert run(ALT, calls["getxattr"]) == "v" and run(ALT, calls["listxattr"]) == ["user.k"]
    assert denied("setxattr") and denied("removexattr")
    assert run(MAIN, calls["getxattr"]) == "v"
