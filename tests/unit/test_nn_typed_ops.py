"""The NameNode's typed S3 ops (namenode/api/): records keep their short names on the wire and on disk, and a
bucket's settings change only through the named, validated operation."""
import types

import anyio
import msgspec
import orjson
import pytest

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.kv import MemoryKV
from epochfs.namenode import keys
from epochfs.namenode.access_keys import AccessKeys
from epochfs.namenode.api import buckets, objects
from epochfs.namenode.api.services import Services
from epochfs.namenode.metastore import MetaStore


@pytest.fixture
def nn():
    meta = MetaStore(MemoryKV())
    settings = types.SimpleNamespace(block_size=1 << 20, replication=3, default_write_policy="async")
    members = types.SimpleNamespace(addrs=lambda ids: {str(i): f"h{i}:1" for i in ids})
    s = Services(meta, members=members, settings=settings, repair=None, ops=None, access_keys=AccessKeys(meta))
    table = buckets.handlers(s) | objects.handlers(s)

    def call(req):
        return anyio.run(table[type(req)], req, b"")
    call.meta = meta
    return call


def stored_bucket(meta: MetaStore, name: str) -> dict:
    return orjson.loads(meta.kv.get(keys.inode(meta.bucket_ino(name))))["bkt"]


def test_bucket_settings_are_validated_and_stored_under_their_short_names(nn):
    rec = nn(m.BucketCreate(bucket="b", owner="o", write_policy="sync:2"))
    assert (rec.block_size, rec.replication, rec.write_policy, rec.acl) == (1 << 20, 3, "sync:2", "private")
    got = nn(m.BucketSettings(bucket="b", quota_bytes=1000, replication=2, versioning="Enabled", block_size=2 << 20,
                              cors=[m.CorsRule(origins=["*"], methods=["GET"], max_age=5)]))
    assert (got.quota_bytes, got.replication, got.versioning, got.cors[0].max_age) == (1000, 2, "Enabled", 5)
    disk = stored_bucket(nn.meta, "b")
    assert (disk["qb"], disk["rf"], disk["ver"], disk["wp"], disk["bs"]) == (1000, 2, "Enabled", "sync:2", 2 << 20)
    assert disk["cors"] == [{"origins": ["*"], "methods": ["GET"], "max_age": 5}]

    for bad in (dict(write_policy="sometimes"), dict(block_size=1000), dict(replication=0), dict(versioning="On"), dict(quota_bytes=-1),
                dict(ownership="Anyone"), dict(acl="public-everything"), dict(acl=[("id:x", "ALL")]),
                dict(quota_objects=5, write_policy="sync:99")):
        with pytest.raises(errors.InvalidInput):
            nn(m.BucketSettings(bucket="b", **bad))
    assert stored_bucket(nn.meta, "b") == disk  # a refused change writes nothing, not even its valid part

    nn(m.BucketSettings(bucket="b", quota_bytes=m.Unset(), cors=m.Unset()))
    got = nn(m.BucketInfo(bucket="b"))
    assert got.quota_bytes is None and got.cors is None and got.replication == 2
    with pytest.raises(errors.NoSuchBucket):
        nn(m.BucketSettings(bucket="nope"))


def test_an_object_record_travels_with_short_names_and_its_blocks_as_block_refs(nn):
    nn(m.BucketCreate(bucket="b", owner="o"))
    nn.meta.put_object("b", "k", {"size": 10, "etag": '"e"', "blk": [[7, 10, 99, [1, 2, 3]]], "ctype": "text/x",
                                  "meta": {"a": "1"}, "owner": "o", "sc": "GLACIER", "mode": 0o100644})
    res = nn(m.Stat(bucket="b", key="k"))
    obj = res.obj
    assert res.addrs == {"1": "h1:1", "2": "h2:1", "3": "h3:1"}
    assert obj.blocks == (m.BlockRef(7, 10, 99, (1, 2, 3)),)
    assert (obj.size, obj.etag, obj.content_type, obj.meta, obj.storage_class) == (10, '"e"', "text/x", {"a": "1"},
                                                                                   "GLACIER")
    wire = msgspec.json.decode(msgspec.json.encode(res))
    assert wire["obj"]["blk"] == [[7, 10, 99, [1, 2, 3]]] and wire["obj"]["sc"] == "GLACIER"
    assert "mode" not in wire["obj"]  # POSIX attributes stay with the POSIX ops

    nn(m.ObjectSettings(bucket="b", key="k", acl="public-read"))
    assert nn(m.Stat(bucket="b", key="k")).obj.acl == "public-read"
    with pytest.raises(errors.InvalidInput):
        nn(m.ObjectSettings(bucket="b", key="k", acl="everyone"))
    with pytest.raises(errors.NoSuchKey):
        nn(m.ObjectSettings(bucket="b", key="gone", acl="private"))


def wire(reply):
    """A reply as the caller gets it: encoded, sent, decoded into its type."""
    return msgspec.json.decode(msgspec.json.encode(reply), type=type(reply))


def test_listings_decode_into_typed_entries(nn):
    nn(m.BucketCreate(bucket="b", owner="o"))
    for k in ("a", "d/x", "d/y"):
        nn.meta.put_object("b", k, {"size": 1, "etag": '"e"', "blk": [], "owner": "o"})
    page = wire(nn(m.ListObjects(bucket="b", delimiter="/")))
    assert [type(i) for i in page.items] == [m.ListEntry, m.ListPrefix]
    assert (page.items[0].key, page.items[1].prefix, page.truncated) == ("a", "d/", False)
    assert msgspec.json.encode(page.items[1]) == b'["p","d/"]'
    vers = wire(nn(m.ListVersions(bucket="b")))
    assert [(v.key, v.version_id, v.latest) for v in vers.items] == [("a", "null", True), ("d/x", "null", True),
                                                                    ("d/y", "null", True)]


def test_bucket_usage_names_its_bytes_and_objects(nn):
    nn(m.BucketCreate(bucket="b", owner="o"))
    nn(m.BucketCreate(bucket="c", owner="o"))
    for k, size in (("x", 10), ("y", 5)):
        nn.meta.put_object("b", k, {"size": size, "etag": '"e"', "blk": [], "owner": "o"})
    one = wire(nn(m.BucketUsage(bucket="b")))
    assert one.usage == {"b": m.BucketUsed(bytes=15, objects=2)}
    every = wire(nn(m.BucketUsage()))
    assert (every.usage["b"].bytes, every.usage["b"].objects, every.usage["c"]) == (15, 2, m.BucketUsed(0, 0))
    assert msgspec.json.decode(msgspec.json.encode(one)) == {"usage": {"b": [15, 2]}}  # the wire form as before
