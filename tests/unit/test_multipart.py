"""Completing multipart uploads on an in-memory KV: retries, repeated part numbers, and the object's checksums."""
import pytest

from epochfs.common import errors
from epochfs.common.checksums import combine, composite, new_hasher
from epochfs.common.kv import MemoryKV
from epochfs.namenode.metastore import MetaStore

DATA = [b"A" * 7, b"B" * 5, b"C" * 3]


def cs(alg, data):
    h = new_hasher(alg)
    h.update(data)
    return h.b64()


def etag(i):
    return "0123456789abcdef"[i] * 32


def upload(attrs=None, algs=("crc32",)):
    m = MetaStore(MemoryKV())
    m.create_bucket("bkt", "owner")
    uid = m.create_upload("bkt", "k", attrs or {})
    for i, d in enumerate(DATA):
        m.put_part("bkt", "k", uid, i + 1, {"size": len(d), "etag": f'"{etag(i)}"', "blk": [[i + 1, len(d), 0, [1]]],
                                            "cs": {a: cs(a, d) for a in algs}})
    return m, uid


def wanted(n=len(DATA)):
    return [{"n": i + 1, "etag": etag(i)} for i in range(n)]


def test_complete_again_answers_as_the_first_time():
    m, uid = upload()
    first = m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)
    again = m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)
    assert (again["etag"], again["size"]) == (first["etag"], first["size"]) == (first["etag"], 15)
    with pytest.raises(errors.NoSuchUpload):  # another part list is not a retry of this completion
        m.complete_upload("bkt", "k", uid, wanted(2), min_part_size=1)
    m.delete_object("bkt", "k")
    with pytest.raises(errors.NoSuchUpload):
        m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)


def test_part_listed_twice_is_out_of_order():
    m, uid = upload()
    with pytest.raises(errors.InvalidPartOrder):
        m.complete_upload("bkt", "k", uid, wanted(1) + wanted(), min_part_size=1)
    res = m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)
    assert res["size"] == 15 and res["etag"].endswith('-3"')
    assert m.stat("bkt", "k")["ps"] == [7, 5, 3]


def test_the_order_is_judged_before_the_part_sizes():
    m, uid = upload()
    with pytest.raises(errors.InvalidPartOrder):  # part 3 (3 bytes) first is too small too: S3 names the order
        m.complete_upload("bkt", "k", uid, list(reversed(wanted())), min_part_size=6)
    with pytest.raises(errors.EntityTooSmall):
        m.complete_upload("bkt", "k", uid, wanted(), min_part_size=6)


def test_composite_checksum_and_part_checksums_are_stored():
    m, uid = upload({"csa": "sha256", "cst": "COMPOSITE"}, algs=("sha256",))
    res = m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)
    want = composite("sha256", [cs("sha256", d) for d in DATA])
    assert res["cs"] == {"sha256": want, "type": "COMPOSITE"}
    obj = m.stat("bkt", "k")
    assert obj["cs"] == res["cs"] and obj["pcs"] == [cs("sha256", d) for d in DATA]
    assert "csa" not in obj and "cst" not in obj


@pytest.mark.parametrize("alg", ["crc32", "crc32c", "crc64nvme"])
def test_full_object_checksum_is_the_crc_of_the_whole(alg):
    m, uid = upload({"csa": alg, "cst": "FULL_OBJECT"}, algs=(alg,))
    res = m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)
    assert res["cs"] == {alg: cs(alg, b"".join(DATA)), "type": "FULL_OBJECT"}
    assert res["cs"][alg] == combine(alg, [(cs(alg, d), len(d)) for d in DATA])


def test_crc64nvme_defaults_to_full_object_and_others_to_composite():
    m, uid = upload({"csa": "crc64nvme"}, algs=("crc64nvme",))
    assert m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)["cs"]["type"] == "FULL_OBJECT"
    m, uid = upload({"csa": "crc32"}, algs=("crc32",))
    assert m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)["cs"]["type"] == "COMPOSITE"


def test_expected_checksum_must_match_and_a_mismatch_commits_nothing():
    m, uid = upload({"csa": "crc32", "cst": "FULL_OBJECT"}, algs=("crc32",))
    with pytest.raises(errors.ChecksumMismatch):  # S3: BadDigest
        m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1, checksum={"crc32": cs("crc32", b"other")})
    with pytest.raises(errors.ChecksumModeMismatch):  # S3: InvalidRequest
        m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1, checksum={"type": "COMPOSITE"})
    with pytest.raises(errors.NoSuchKey):
        m.stat("bkt", "k")
    whole = cs("crc32", b"".join(DATA))
    res = m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1,
                            checksum={"crc32": whole, "type": "FULL_OBJECT"})
    assert res["cs"]["crc32"] == whole


def test_no_checksum_without_an_upload_algorithm():
    m, uid = upload()
    assert m.complete_upload("bkt", "k", uid, wanted(), min_part_size=1)["cs"] == {}
    assert "cs" not in m.stat("bkt", "k")
