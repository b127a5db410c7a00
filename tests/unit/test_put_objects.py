"""PutObjects, the NameNode's batch commit: each item whole or not at all, the others committed, on an in-memory KV."""
import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV
from epochfs.namenode import commands as cmds
from epochfs.namenode.metastore import MetaStore


def obj(size: int, etag: str = '"e"') -> dict:
    return {"size": size, "etag": etag, "blk": []}


def store() -> MetaStore:
    m = MetaStore(MemoryKV())
    m.create_bucket("bkt", "owner")
    return m


def keys_of(m: MetaStore) -> list[str]:
    return [it[1] for it in m.list_objects("bkt", "", "", "", 1000)["items"]]


def test_a_batch_commits_like_puts_one_by_one_new_directories_shared():
    batch, single = store(), store()
    names = ["d/x/1", "d/x/2", "d/y/3", "e", "d/x/4/5"]
    res = batch.put_objects("bkt", [(k, obj(i, f'"{i}"'), None, None) for i, k in enumerate(names)])
    for i, k in enumerate(names):
        single.put_object("bkt", k, obj(i, f'"{i}"'))
    assert [r["etag"] for r in res] == [f'"{i}"' for i in range(len(names))]
    assert keys_of(batch) == keys_of(single) == sorted(names)
    assert batch.list_objects("bkt", "d/", "/", "", 1000)["items"] == \
        single.list_objects("bkt", "d/", "/", "", 1000)["items"]
    for k in names:
        assert batch.stat("bkt", k)["size"] == single.stat("bkt", k)["size"]
    assert batch.usage(batch.bucket_ino("bkt")) == [sum(range(len(names))), len(names)]
    # directory d/x was made once: its two files are in the same directory
    assert batch.stat("bkt", "d/x/1")["ln"][0][0] == batch.stat("bkt", "d/x/2")["ln"][0][0]


def test_an_item_over_quota_is_refused_alone_and_leaves_nothing():
    m = store()
    m.update_bucket("bkt", {"qo": 2})
    m.put_object("bkt", "old", obj(1))
    res = m.put_objects("bkt", [("a", obj(1), None, None), ("q/r/s", obj(1), None, None),
                                ("old", obj(5), None, None), ("b", obj(1), None, None)])
    assert isinstance(res[0], dict) and isinstance(res[2], dict)  # the overwrite adds no object
    assert isinstance(res[1], errors.QuotaExceeded) and isinstance(res[3], errors.QuotaExceeded)
    assert keys_of(m) == ["a", "old"]
    assert not any(it[1].startswith("q") for it in m.list_objects("bkt", "", "/", "", 1000)["items"])
    assert m.usage(m.bucket_ino("bkt")) == [6, 2]
    m._usage.clear()  # what the store holds, not the cache
    assert m.usage(m.bucket_ino("bkt")) == [6, 2]
    m.update_bucket("bkt", {"qo": 10})
    m.put_object("bkt", "q/r/s", obj(1))  # the refused item's directories were never half-made
    assert "q/r/s" in keys_of(m)


def test_conditions_markers_and_duplicates():
    m = store()
    m.put_object("bkt", "exists", obj(1))
    res = m.put_objects("bkt", [("exists", obj(2), None, "*"), ("new", obj(2), None, "*"),
                                ("dir/", obj(0), None, None), ("exists2", obj(2), '"nope"', None)])
    assert isinstance(res[0], errors.PreconditionFailed) and isinstance(res[1], dict)
    assert isinstance(res[2], errors.InvalidInput) and isinstance(res[3], errors.NoSuchKey)  # If-Match on no object, as S3
    assert m.stat("bkt", "exists")["size"] == 1
    with pytest.raises(errors.InvalidInput):
        m.put_objects("bkt", [("k", obj(1), None, None), ("k", obj(2), None, None)])
    assert "k" not in keys_of(m)


def test_versioned_bucket_keeps_the_old_version_and_each_item_has_its_own_version_id():
    m = store()
    m.update_bucket("bkt", {"ver": "Enabled"})
    first = m.put_object("bkt", "a", obj(1, '"one"'))
    res = m.put_objects("bkt", [("a", obj(2, '"two"'), None, None), ("b", obj(3), None, None)])
    assert res[0]["vid"] and res[1]["vid"] and len({first["vid"], res[0]["vid"], res[1]["vid"]}) == 3
    assert m.stat("bkt", "a")["etag"] == '"two"'
    assert m.stat("bkt", "a", first["vid"])["etag"] == '"one"'


def test_replaying_the_command_gives_the_same_bytes():
    a = store()
    a.update_bucket("bkt", {"qo": 2})
    cmd = cmds.PutObjects(bucket="bkt", t=123, items=[
        cmds.PutItem(key=k, obj=obj(1), vid=f"v{k}") for k in ("x/1", "x/2", "y/3")])
    b = MetaStore(MemoryKV())
    for m in (a, b):
        if m is b:
            b.create_bucket("bkt", "owner")
            b.update_bucket("bkt", {"qo": 2})
        res = m.execute(cmd)
        assert isinstance(res[2], errors.QuotaExceeded)
    assert cmds.decode(cmds.encode(cmd)) == cmd
    assert keys_of(a) == keys_of(b) == ["x/1", "x/2"]
