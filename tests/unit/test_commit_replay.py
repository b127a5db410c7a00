"""A commit sent twice: the NameNode applied it and its answer was lost (killed before the reply went out, a dropped
connection), so the caller's NameNodeClient sends it again. The second must change nothing -- applied again it
replaced the object by itself and freed the very blocks it names, leaving a listed object whose copies were deleted.
And a commit takes only pending blocks: none committed to another object, given back, or expired."""
import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV
from epochfs.namenode.metastore import MetaStore


def store(versioning: str | None = None) -> MetaStore:
    m = MetaStore(MemoryKV())
    m.create_bucket("bkt", "owner")
    if versioning:
        m.update_bucket("bkt", {"ver": versioning})
    return m


def written(m: MetaStore, n: int) -> list:
    """`n` blocks allocated (pending) and, as the gateway sends them, [id, size, crc, nodes]."""
    return [[bid, 10, 7, nodes] for bid, nodes in m.allocate(n, lambda bid, i: [1, 2, 3])]


def garbage(m: MetaStore) -> set[int]:
    return {bid for n in (1, 2, 3) for bid in m.garbage_for(n)} | {bid for s in m.freed_on().values() for bid in s}


@pytest.mark.parametrize("versioning", [None, "Enabled"])
def test_a_put_object_sent_again_answers_as_the_first_and_frees_nothing(versioning):
    m = store(versioning)
    blk = written(m, 3)
    first = m.put_object("bkt", "k", {"size": 30, "etag": '"e"', "blk": blk}, fresh=True)
    seq = m.seq
    again = m.put_object("bkt", "k", {"size": 30, "etag": '"e"', "blk": blk}, fresh=True, if_none_match="*")
    assert again == first and m.seq == seq + 1  # a command (logged), that wrote nothing but its sequence number
    assert garbage(m) == set() and m.pending_count() == 0
    assert [b[0] for b in m.stat("bkt", "k")["blk"]] == [b[0] for b in blk]
    assert len(m.key_versions("bkt", "k")) == 1


def test_without_fresh_a_second_commit_of_the_same_blocks_frees_them():
    """What the NameNode did before every RPC commit was fresh (kept for in-process callers that commit made-up
    blocks): the object is replaced by itself and its blocks are freed while it still names them."""
    m = store()
    blk = written(m, 2)
    m.put_object("bkt", "k", {"size": 20, "etag": '"e"', "blk": blk})
    m.put_object("bkt", "k", {"size": 20, "etag": '"e"', "blk": blk})
    assert garbage(m) == {b[0] for b in blk}


def test_a_commit_takes_only_pending_blocks():
    m = store()
    a, b, c = written(m, 1), written(m, 1), written(m, 2)
    m.put_object("bkt", "a", {"size": 10, "etag": '"a"', "blk": a}, fresh=True)
    m.abandon([b[0][0]])  # given back (a failed upload): its copies are being deleted
    for key, blk in (("other", a), ("b", b), ("twice", [c[0], c[0]]), ("never", [[999, 10, 7, [1]]])):
        with pytest.raises(errors.InvalidInput):
            m.put_object("bkt", key, {"size": 10 * len(blk), "etag": '"x"', "blk": blk}, fresh=True)
    assert [it[1] for it in m.list_objects("bkt", "", "", "", 100)["items"]] == ["a"]
    assert m.stat("bkt", "a")["etag"] == '"a"'
    expired = written(m, 1)
    assert m.expire_pending(now=2**62) == 3  # c's two and `expired`
    with pytest.raises(errors.InvalidInput):
        m.put_object("bkt", "late", {"size": 10, "etag": '"l"', "blk": expired}, fresh=True)


def test_a_commit_sent_again_after_another_writer_replaced_the_object_is_refused():
    """Its blocks were freed when the other object replaced it: committing them again would list deleted copies."""
    m = store()
    mine, theirs = written(m, 2), written(m, 1)
    m.put_object("bkt", "k", {"size": 20, "etag": '"mine"', "blk": mine}, fresh=True)
    m.put_object("bkt", "k", {"size": 10, "etag": '"theirs"', "blk": theirs}, fresh=True)
    with pytest.raises(errors.InvalidInput):
        m.put_object("bkt", "k", {"size": 20, "etag": '"mine"', "blk": mine}, fresh=True)
    assert m.stat("bkt", "k")["etag"] == '"theirs"' and garbage(m) == {b[0] for b in mine}


def test_a_part_sent_again_frees_nothing_and_a_batch_sent_again_answers_as_it_did():
    m = store()
    up = m.create_upload("bkt", "big", {})
    part = written(m, 2)
    m.put_part("bkt", "big", up, 1, {"size": 20, "etag": '"' + "a" * 32 + '"', "blk": part}, fresh=True)
    m.put_part("bkt", "big", up, 1, {"size": 20, "etag": '"' + "a" * 32 + '"', "blk": part}, fresh=True)
    assert garbage(m) == set()
    with pytest.raises(errors.InvalidInput):  # another upload's part can't take them
        up2 = m.create_upload("bkt", "big2", {})
        m.put_part("bkt", "big2", up2, 1, {"size": 20, "etag": '"' + "a" * 32 + '"', "blk": part}, fresh=True)

    x, y = written(m, 1), written(m, 1)
    items = [("x", {"size": 10, "etag": '"x"', "blk": x}, None, None),
             ("y", {"size": 10, "etag": '"y"', "blk": y}, None, None)]
    first = m.put_objects("bkt", items, fresh=True)
    again = m.put_objects("bkt", items, fresh=True)
    assert again == first and garbage(m) == set()


def test_a_mount_commit_takes_only_pending_blocks_and_keeps_blocks_by_id():
    """The mount's commit (Posix.commit, fresh as every RPC commit): its new blocks must be pending, each named
    once; a bare id keeps a block of the version it was made from, pending or not."""
    from epochfs.namenode.posix import Posix
    m = store()
    fs = Posix(m)
    fs.b = m.bucket_ino("bkt")
    f = fs.mknod(fs.b, "f", 0o100644, 0, 0)["ino"]
    first = written(m, 2)
    v1 = fs.commit(f, first, 20, '"v1"', fresh=True)
    given_back, twice = written(m, 1), written(m, 1)
    m.abandon([given_back[0][0]])
    for blk in (first[:1], given_back, [twice[0], twice[0]], [[999, 10, 7, [1]]]):
        with pytest.raises(errors.InvalidInput):
            fs.commit(f, blk, 10 * len(blk), '"x"', base='"v1"', fresh=True)
    assert fs.getattr(f)["etag"] == '"v1"'
    new = written(m, 1)
    v2 = fs.commit(f, [first[0][0], new[0]], 20, '"v2"', base='"v1"', fresh=True)
    assert [b for b, _ in v2["layout"]] == [first[0][0], new[0][0]] and v1["etag"] == '"v1"'
    assert m.pending_count() == 1  # twice's block, never taken
