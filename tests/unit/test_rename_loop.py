"""A rename never moves a directory below itself: each directory records its parent ("pa"), and the NameNode walks
from the new parent up to the root before it moves one (namenode/posix.py, _check_not_below)."""
import errno
import random

import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV, prefix_end
from epochfs.frontends import errmap
from epochfs.namenode import commands as cmds, keys, posix as posix_mod
from epochfs.namenode.keys import ROOT_INO
from epochfs.namenode.metastore import MetaStore, enc_record
from epochfs.namenode.posix import RENAME_EXCHANGE, Posix


class ListLog:
    def __init__(self) -> None:
        self.entries: list[bytes] = []

    def append(self, raw: bytes) -> None:
        self.entries.append(raw)


def dump(kv) -> dict[bytes, bytes]:
    return dict(kv.scan(b"", None))


@pytest.fixture
def fs():
    m = MetaStore(MemoryKV(), log=ListLog())
    m.create_bucket("bkt", "owner")
    p = Posix(m)
    p.scope(m.bucket_ino("bkt"), "rename", {})
    p.b = m.bucket_ino("bkt")
    return p


def tree(fs, path: str) -> int:
    """mkdir -p below the bucket; the inode of the last directory."""
    d = fs.b
    for name in path.split("/"):
        found = fs._child(d, name)
        d = found[0] if found else fs.mkdir(d, name, 0o755, 0, 0)["ino"]
    return d


def dir_entries(kv):
    """(parent, child) of every directory entry in the store."""
    for k, v in kv.scan(b"E", prefix_end(b"E")):
        if k.endswith(b"/"):
            yield int.from_bytes(k[1:9], "big"), int.from_bytes(v[:8], "big")


def check_tree(m: MetaStore) -> None:
    """Every directory's "pa" is the directory whose entry names it, and every directory is reachable from the root
    (a detached loop would not be)."""
    children: dict[int, list[int]] = {}
    for parent, child in dir_entries(m.kv):
        assert m.get_inode(child)["pa"] == parent
        children.setdefault(parent, []).append(child)
    reached, todo = {ROOT_INO}, [ROOT_INO]
    while todo:
        for c in children.get(todo.pop(), []):
            assert c not in reached
            reached.add(c)
            todo.append(c)
    dirs = {int.from_bytes(k[1:], "big") for k, v in m.kv.scan(b"I", prefix_end(b"I"))
            if m._dec(v).get("t") == "d"}
    assert dirs == reached


def refused(fs, *args, **kw) -> int:
    before, n = dump(fs.kv), len(fs.meta.log.entries)
    with pytest.raises(errors.InvalidMove) as e:
        fs.rename(*args, **kw)
    assert dump(fs.kv) == before and len(fs.meta.log.entries) == n  # nothing written, nothing logged
    return errmap.to_errno(e.value)


def test_a_directory_cannot_move_into_itself_or_below(fs):
    a, b, c = tree(fs, "a"), tree(fs, "a/b"), tree(fs, "a/b/c")
    fs.meta.put_object("bkt", "a/b/c/file", {"size": 3, "etag": '"e"', "blk": []})
    assert refused(fs, fs.b, "a", a, "x") == errno.EINVAL         # into itself
    assert refused(fs, fs.b, "a", b, "x") == errno.EINVAL         # into its child
    assert refused(fs, fs.b, "a", c, "x") == errno.EINVAL         # into its grandchild
    assert refused(fs, a, "b", c, "b") == errno.EINVAL
    fs.mkdir(c, "x", 0o755, 0, 0)
    assert refused(fs, fs.b, "a", c, "x", RENAME_EXCHANGE) == errno.EINVAL  # a swapped with a dir below it
    assert refused(fs, c, "x", fs.b, "a", RENAME_EXCHANGE) == errno.EINVAL  # the same, named the other way
    assert [i[1] for i in fs.meta.list_objects("bkt")["items"]] == ["a/", "a/b/", "a/b/c/", "a/b/c/file",
                                                                     "a/b/c/x/"]
    check_tree(fs.meta)


def test_legal_moves_still_work_and_keep_parents_right(fs):
    a, b, s = tree(fs, "a"), tree(fs, "a/b"), tree(fs, "s/t/u")
    fs.meta.put_object("bkt", "a/b/k", {"size": 1, "etag": '"e"', "blk": []})  # S3 makes no directory here
    fs.meta.put_object("bkt", "p/q/r/k", {"size": 1, "etag": '"e"', "blk": []})  # S3 makes p, p/q, p/q/r
    fs.rename(fs.b, "a", s, "a")                       # into a sibling's subtree
    fs.rename(a, "b", fs.b, "b")                       # a child up to the top
    fs.rename(fs.b, "b", a, "b2")                      # and back into its old parent under another name
    fs.rename(fs.b, "p", tree(fs, "s/t"), "p")         # an implicit S3 directory
    fs.rename(tree(fs, "s/t"), "u", fs.b, "u")          # the parent of a directory moved earlier
    fs.rename(fs.b, "u", fs.b, "u2")                   # same parent: no walk
    fs.rename(fs.b, "u2", tree(fs, "s/t/p/q"), "r", RENAME_EXCHANGE)  # swap two directories of unrelated subtrees
    assert fs.meta.get_inode(b)["pa"] == a
    files = [i[1] for i in fs.meta.list_objects("bkt")["items"] if not i[1].endswith("/")]
    assert files == ["s/t/p/q/r/a/b2/k", "u2/k"]
    check_tree(fs.meta)
    assert refused(fs, tree(fs, "s/t/p/q/r"), "a", b, "a") == errno.EINVAL  # a moved, then a move below it


def test_rename_chains_and_replay_give_the_same_store():
    """Random directory moves (many into their own subtrees), with mkdir, rmdir and S3 PUT/DELETE making and removing
    directories: the tree stays whole after every step, and replaying the log gives the same bytes."""
    rng = random.Random(7)
    log = ListLog()
    m = MetaStore(MemoryKV(), log=log)
    m.create_bucket("bkt", "owner")
    fs = Posix(m)
    fs.scope(m.bucket_ino("bkt"), "rename", {})
    bi = m.bucket_ino("bkt")
    loops = 0
    for step in range(600):
        dirs = [(p, k[9:-1].decode(), c) for k, v in m.kv.scan(b"E", prefix_end(b"E")) if k.endswith(b"/")
                for p, c in [(int.from_bytes(k[1:9], "big"), int.from_bytes(v[:8], "big"))] if p != ROOT_INO]
        op = rng.choice(["mkdir", "mkdir", "put", "delete", "rename", "rename", "rename", "rmdir"])
        try:
            if op == "mkdir":
                fs.mkdir(rng.choice([bi] + [c for _, _, c in dirs]), f"d{rng.randint(0, 9)}", 0o755, 0, 0)
            elif op == "put":
                m.put_object("bkt", "/".join(f"s{rng.randint(0, 2)}" for _ in range(rng.randint(1, 4))) + "/k",
                             {"size": 1, "etag": '"e"', "blk": []})
            elif op == "delete" and dirs:
                m.delete_object("bkt", "/".join(f"s{rng.randint(0, 2)}" for _ in range(rng.randint(1, 4))) + "/k")
            elif op == "rename" and dirs:
                parent, name, _ = rng.choice(dirs)
                fs.rename(parent, name, rng.choice([bi] + [c for _, _, c in dirs]), f"r{rng.randint(0, 9)}",
                          rng.choice([0, 0, RENAME_EXCHANGE]))
            elif op == "rmdir" and dirs:
                parent, name, _ = rng.choice(dirs)
                fs.rmdir(parent, name)
        except errors.InvalidMove:
            loops += 1
        except errors.DomainError:
            pass
        check_tree(m)
    assert loops > 10
    assert {"rename", "mkdir", "rmdir", "put_object", "delete_object"} <= \
        {cmds.decode(raw).__struct_config__.tag for raw in log.entries}
    r = MetaStore(MemoryKV(), init_root=False)
    for raw in log.entries:
        r.execute(cmds.decode(raw))
    assert dump(r.kv) == dump(m.kv)


def test_a_store_without_parents_is_checked_by_searching_down(fs):
    """Directories written before parents were recorded have no "pa": the check searches the moved directory's
    subtree instead, and a move records the parent of the directory it moves."""
    a, c, s = tree(fs, "a"), tree(fs, "a/b/c"), tree(fs, "s")
    fs.meta.put_object("bkt", "p/q/k", {"size": 1, "etag": '"e"', "blk": []})
    for k, v in list(fs.kv.scan(b"I", prefix_end(b"I"))):  # as an older NameNode wrote them
        rec = fs.meta._dec(v)
        rec.pop("pa", None)
        fs.kv.put(k, enc_record(rec))
    assert refused(fs, fs.b, "a", c, "x") == errno.EINVAL
    fs.rename(fs.b, "a", s, "a")
    assert fs.meta.get_inode(a)["pa"] == s and "pa" not in fs.meta.get_inode(c)
    assert refused(fs, s, "a", c, "x") == errno.EINVAL  # the walk climbs c -> b (no parent): searched down
    fs.rename(fs.b, "p", c, "p")
    assert [i[1] for i in fs.meta.list_objects("bkt")["items"] if not i[1].endswith("/")] == ["s/a/b/c/p/q/k"]


def test_the_walk_is_bounded_on_a_deep_or_corrupt_store(fs, monkeypatch):
    chain = tree(fs, "/".join(f"n{i}" for i in range(12)))
    other = tree(fs, "o")
    monkeypatch.setattr(posix_mod, "ANCESTRY_MAX", 5)  # deeper than the walk may climb: it searches down
    assert refused(fs, fs.b, "n0", chain, "x") == errno.EINVAL
    fs.rename(fs.b, "o", chain, "o")
    # a corrupt store: two directories that name each other as parent; the walk stops and searches down
    x, y = tree(fs, "x"), tree(fs, "y")
    for ino, pa in ((x, y), (y, x)):
        rec = fs.meta.get_inode(ino)
        rec["pa"] = pa
        fs.kv.put(keys.inode(ino), enc_record(rec))
    fs.rename(chain, "o", x, "o")
    assert fs.meta.get_inode(other)["pa"] == x
    assert refused(fs, fs.b, "x", other, "x") == errno.EINVAL
