"""Bucket usage counters and quotas in the metastore, and the NameNode's access-key records (in-memory KV)."""
import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV
from epochfs.namenode import keys
from epochfs.namenode.access_keys import AccessKeys
from epochfs.namenode.metastore import MetaStore


def obj(size: int) -> dict:
    return {"size": size, "etag": "e", "blk": []}


def usage(m: MetaStore, bucket: str = "b") -> list[int]:
    return m.usage(m.bucket_ino(bucket))


def test_usage_follows_puts_overwrites_and_deletes():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.put_object("b", "a", obj(10))
    m.put_object("b", "d/x", obj(5))
    m.put_object("b", "a", obj(7))        # overwrite: 7 replaces 10
    m.put_object("b", "dir/", obj(0))     # a directory marker is not counted
    assert usage(m) == [12, 2]
    m.delete_object("b", "a")
    m.delete_object("b", "a")             # deleting a missing key changes nothing
    assert usage(m) == [5, 1]
    assert m.bucket_usage() == {"b": [5, 1]}


def test_usage_with_versions_counts_the_current_version():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.update_bucket("b", {"ver": "Enabled"})
    v1 = m.put_object("b", "k", obj(10))["vid"]
    m.put_object("b", "k", obj(20))
    assert usage(m) == [20, 1]
    dm = m.delete_object("b", "k")        # a delete marker hides the key
    assert usage(m) == [0, 0]
    m.delete_object("b", "k", version_id=dm["vid"])  # removing the marker brings the newest version back
    assert usage(m) == [20, 1]
    m.delete_object("b", "k", version_id=v1)         # a noncurrent version is not counted
    assert usage(m) == [20, 1]


def test_usage_survives_restart_and_is_recounted_when_missing():
    kv = MemoryKV()
    m = MetaStore(kv)
    m.create_bucket("b", "o")
    m.put_object("b", "x/y", obj(3))
    assert usage(MetaStore(kv)) == [3, 1]
    kv.delete(keys.usage(m.bucket_ino("b")))  # a bucket made before usage was kept
    assert usage(MetaStore(kv)) == [3, 1]


def test_quota_refuses_growth_and_commits_nothing():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.update_bucket("b", {"qb": 100, "qo": 2})
    m.put_object("b", "a", obj(60))
    with pytest.raises(errors.QuotaExceeded, match="100 bytes"):
        m.put_object("b", "b", obj(41))
    with pytest.raises(errors.NoSuchKey):
        m.stat("b", "b")
    m.put_object("b", "a", obj(100))      # an overwrite up to the limit is fine
    m.put_object("b", "a", obj(10))
    m.put_object("b", "c", obj(10))
    with pytest.raises(errors.QuotaExceeded, match="2 objects"):
        m.put_object("b", "d", obj(0))
    assert usage(m) == [20, 2]


def test_access_keys_lifecycle():
    ak = AccessKeys(MetaStore(MemoryKV()))
    rec = ak.create({"access_key": "KEY1", "secret_key": "secret-123", "buckets": {"b": "read"}})
    assert rec["buckets"] == {"b": "read"} and not rec["disabled"]
    with pytest.raises(errors.AlreadyExists):
        ak.create({"access_key": "KEY1", "secret_key": "secret-123"})
    for bad in ({"access_key": "a b", "secret_key": "secret-123"}, {"access_key": "KEY2", "secret_key": "short"},
                {"access_key": "KEY2", "secret_key": "secret-123", "buckets": {"b": "admin"}}):
        with pytest.raises(errors.InvalidInput):
            ak.create(bad)
    assert ak.update("KEY1", {"disabled": True})["disabled"]
    with pytest.raises(errors.InvalidInput):
        ak.update("KEY1", {"secret_key": "new-secret"})
    assert [k["access_key"] for k in ak.list()] == ["KEY1"] and "secret_key" not in ak.list()[0]
    ak.forget_bucket("b")
    assert ak.get("KEY1")["buckets"] == {}
    ak.delete("KEY1")
    with pytest.raises(errors.NotFound):
        ak.get("KEY1")
