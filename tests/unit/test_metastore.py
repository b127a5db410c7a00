"""The namespace on an in-memory KV: S3 listing order and semantics checked against a brute-force model."""
import random

import pytest

from epochfs.common import errors
from epochfs.common.blocks import block_id
from epochfs.common.kv import MemoryKV
from epochfs.namenode.metastore import MetaStore

KEYS = ["a", "a-b", "a/b", "a/b/c", "a/b/d/e", "a0", "b/", "b/x", "foo/bar", "foo/bar/xyzzy", "quux/thud", "asdf",
        "c%20d", "ü/x", "z", "zz/", "a/b/", "a/c"]


def store_with(keys):
    m = MetaStore(MemoryKV())
    m.create_bucket("bkt", "owner")
    for k in keys:
        m.put_object("bkt", k, {"size": len(k), "etag": '"e"', "blk": []})
    return m


def model(keys, prefix, delimiter, after, max_keys):
    entries = []
    for k in sorted(set(keys)):
        if not k.startswith(prefix):
            continue
        if delimiter:
            i = k.find(delimiter, len(prefix))
            if i >= 0:
                cp = k[: i + len(delimiter)]
                if cp > after and (not entries or entries[-1] != ("p", cp)):
                    entries.append(("p", cp))
                continue
        if k > after:
            entries.append(("k", k))
    return entries[:max_keys], len(entries) > max_keys


def listed(m, prefix="", delimiter="", after="", max_keys=1000):
    res = m.list_objects("bkt", prefix, delimiter, after, max_keys)
    return [(it[0], it[1]) for it in res["items"]], res["truncated"]


@pytest.mark.parametrize("delimiter", ["", "/", "b", "-"])
@pytest.mark.parametrize("prefix", ["", "a", "a/", "a/b", "a/b/", "foo/", "zz", "nothing"])
def test_listing_matches_model(prefix, delimiter):
    m = store_with(KEYS)
    for after in ["", "a", "a/", "a/b", "a/b/c", "b/", "foo/bar", "zzz"]:
        assert listed(m, prefix, delimiter, after) == model(KEYS, prefix, delimiter, after, 1000), (prefix, after)


def test_paging_walks_every_key_once():
    rnd = random.Random(7)
    keys = sorted({"/".join(rnd.choice("ab-0") * rnd.randint(1, 2) for _ in range(rnd.randint(1, 4)))
                   for _ in range(300)})
    keys = [k for k in keys if "//" not in k]
    m = store_with(keys)
    seen, after = [], ""
    while True:
        items, truncated = listed(m, after=after, max_keys=7)
        seen += [k for _, k in items]
        if not truncated:
            break
        after = items[-1][1]
    assert seen == sorted(set(keys))


def test_file_and_directory_of_the_same_name():
    m = store_with(["foo/bar", "foo/bar/xyzzy"])
    assert m.stat("bkt", "foo/bar")["size"] == 7
    m.delete_object("bkt", "foo/bar")
    assert listed(m) == ([("k", "foo/bar/xyzzy")], False)


def test_delete_prunes_implicit_directories_but_keeps_markers():
    m = store_with(["x/y/z", "m/"])
    m.delete_object("bkt", "x/y/z")
    assert listed(m, delimiter="/") == ([("p", "m/")], False)
    m.put_object("bkt", "m/inner", {"size": 1, "etag": '"e"', "blk": []})
    m.delete_object("bkt", "m/inner")
    assert listed(m) == ([("k", "m/")], False)


def test_bad_keys_are_rejected():
    m = store_with([])
    for k in ["a//b", "/a", "a/../b", "./a", "a/.", "x" * 1025, "a\x00b"]:
        with pytest.raises(errors.InvalidInput):
            m.put_object("bkt", k, {"size": 0, "etag": '"e"', "blk": []})


def test_bucket_not_empty_and_conditions():
    m = store_with(["k"])
    with pytest.raises(errors.BucketNotEmpty):
        m.delete_bucket("bkt")
    with pytest.raises(errors.PreconditionFailed):
        m.put_object("bkt", "k", {"size": 0, "etag": '"f"', "blk": []}, if_none_match="*")
    m.put_object("bkt", "k", {"size": 0, "etag": '"f"', "blk": []}, if_match='"e"')
    assert m.stat("bkt", "k")["etag"] == '"f"'


def test_overwrite_and_delete_turn_blocks_into_garbage():
    m = store_with([])
    m.put_object("bkt", "k", {"size": 1, "etag": '"e"', "blk": [[10, 1, 0, [1, 2]]]})
    m.put_object("bkt", "k", {"size": 1, "etag": '"e"', "blk": [[11, 1, 0, [2, 3]]]})
    assert m.garbage_for(1) == [10] and m.garbage_for(2) == [10]
    m.delete_object("bkt", "k")
    assert m.garbage_for(3) == [11]


def test_complete_upload_concatenates_parts():
    m = store_with([])
    uid = m.create_upload("bkt", "big", {"ctype": "x"})
    m.put_part("bkt", "big", uid, 1, {"size": 5, "etag": '"' + "a" * 32 + '"', "blk": [[1, 5, 0, [1]]]})
    m.put_part("bkt", "big", uid, 2, {"size": 3, "etag": '"' + "b" * 32 + '"', "blk": [[2, 3, 0, [1]]]})
    with pytest.raises(errors.EntityTooSmall):
        m.complete_upload("bkt", "big", uid, [{"n": 1, "etag": "a" * 32}, {"n": 2, "etag": "b" * 32}],
                          min_part_size=10)
    with pytest.raises(errors.InvalidPartOrder):
        m.complete_upload("bkt", "big", uid, [{"n": 2, "etag": "b" * 32}, {"n": 1, "etag": "a" * 32}],
                          min_part_size=1)
    res = m.complete_upload("bkt", "big", uid, [{"n": 1, "etag": "a" * 32}, {"n": 2, "etag": "b" * 32}],
                            min_part_size=1)
    assert res["etag"].endswith('-2"')
    assert [block_id(b) for b in m.stat("bkt", "big")["blk"]] == [1, 2]
    with pytest.raises(errors.NoSuchUpload):
        m.list_parts("bkt", "big", uid)


def test_versions_listing_with_delimiter_and_markers():
    m = store_with([])
    m.update_bucket("bkt", {"ver": "Enabled"})
    for k in ["a/1", "a/2", "b", "b", "c"]:
        m.put_object("bkt", k, {"size": 1, "etag": '"e"', "blk": []})
    m.delete_object("bkt", "c")
    res = m.list_versions("bkt", delimiter="/")
    rows = [(it[0], it[1], it[3], it[9]) if it[0] == "v" else tuple(it) for it in res["items"]]
    assert rows == [("p", "a/"), ("v", "b", True, False), ("v", "b", False, False), ("v", "c", True, True),
                    ("v", "c", False, False)]
    assert [it[1] for it in m.list_objects("bkt")["items"]] == ["a/1", "a/2", "b"]  # c's delete marker hides it
    # paging by (key, version) marker resumes inside a key's versions
    first = m.list_versions("bkt", max_keys=3)
    assert first["truncated"] and [it[1] for it in first["items"]] == ["a/1", "a/2", "b"]
    rest = m.list_versions("bkt", key_marker="b", vid_marker=first["items"][-1][2])
    assert [(it[1], it[3]) for it in rest["items"]] == [("b", False), ("c", True), ("c", False)]
