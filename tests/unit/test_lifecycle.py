"""Tag sets and lifecycle rules as S3 defines them, and the NameNode's lifecycle worker on an in-memory store with a
clock the test sets (a "day" of 1 s)."""
import time

import anyio
import pytest

from epochfs.common import errors, lifecycle, tagging
from epochfs.common.kv import MemoryKV
from epochfs.common.messages import LifecycleFilter, LifecycleRule
from epochfs.namenode.lifecycle import LifecycleWorker
from epochfs.namenode.metastore import MetaStore

S = 10 ** 9  # ns per second: a "day" in these tests


def test_tag_sets():
    assert tagging.parse_header("b=2&a=1&empty") == {"a": "1", "b": "2", "empty": ""}  # sorted by key
    assert tagging.parse_header("k=%C3%A9t%C3%A9+x") == {"k": "été x"}
    assert tagging.check([("k" * 128, "v" * 256)], 10) == {"k" * 128: "v" * 256}
    for bad in ([("k" * 129, "")], [("k", "v" * 257)], [("", "v")], [("a", "1"), ("a", "2")], [("aws:k", "v")],
                [("k<", "v")], [(str(i), "") for i in range(11)]):
        with pytest.raises(errors.InvalidTag):
            tagging.check(bad, tagging.MAX_OBJECT_TAGS)
    assert len(tagging.check([(str(i), "") for i in range(50)], tagging.MAX_BUCKET_TAGS)) == 50
    with pytest.raises(errors.InvalidTag):
        tagging.parse_header("a=%ff")  # not UTF-8


def test_rule_checks():
    ok = LifecycleRule(id="r", expiration_days=1)
    assert lifecycle.check([ok]) == [ok]
    cases = [
        ([LifecycleRule(id="r" * 256, expiration_days=1)], errors.InvalidInput),
        ([ok, LifecycleRule(id="r", noncurrent_days=1)], errors.InvalidInput),
        ([LifecycleRule(id="r", expiration_days=0)], errors.InvalidInput),
        ([LifecycleRule(id="r")], errors.InvalidConfiguration),
        ([LifecycleRule(id="r", newer_noncurrent=2)], errors.InvalidConfiguration),
        ([LifecycleRule(id="r", expiration_days=1, expired_object_delete_marker=True)], errors.InvalidConfiguration),
        ([LifecycleRule(id="r", filter=LifecycleFilter(tags={"a": "b"}), expired_object_delete_marker=True)],
         errors.InvalidConfiguration),
        ([LifecycleRule(id="r", expiration_date=S)], errors.InvalidInput),  # not midnight
        ([LifecycleRule(id="r", filter=LifecycleFilter(size_gt=10, size_lt=5), expiration_days=1)],
         errors.InvalidInput),
    ]
    for rules, exc in cases:
        with pytest.raises(exc):
            lifecycle.check(rules)


def test_days_round_up_to_midnight_utc():
    day = 86_400 * S
    t = 10 * day + 3600 * S  # 01:00 on day 10
    assert lifecycle.due_ns(t, 1) == 12 * day
    assert lifecycle.due_ns(10 * day, 1) == 11 * day
    assert lifecycle.due_ns(t, 1, day_s=1) == t + S  # a test day is not rounded


def test_matching():
    r = LifecycleRule(id="r", expiration_days=1, filter=LifecycleFilter(prefix="a/", tags={"t": "1"}, size_gt=5,
                                                                          size_lt=10, and_=True))
    assert lifecycle.matches(r, "a/x", 6, {"t": "1", "u": "2"})
    assert not lifecycle.matches(r, "b/x", 6, {"t": "1"})
    assert not lifecycle.matches(r, "a/x", 5, {"t": "1"})
    assert not lifecycle.matches(r, "a/x", 10, {"t": "1"})
    assert not lifecycle.matches(r, "a/x", 6, {"t": "2"})
    assert not lifecycle.matches(r, "a/x", 6, None)  # a delete marker has no tags
    assert lifecycle.matches(LifecycleRule(id="l", prefix="a/", expiration_days=1), "a/y", 0, None)


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def put(m, bucket, key, t, **extra):
    return m.put_object(bucket, key, {"size": extra.pop("size", 1), "etag": '"e"', "blk": [], "mt": t, **extra})


def sweep(m, clock) -> dict:
    w = LifecycleWorker(m, day_s=1, actions_per_s=0, clock=clock)
    anyio.run(w.run_once)
    return w.jobs_list()[-1] if w.jobs_list() else {}


def keys(m, bucket="b") -> list[str]:
    return [it[1] for it in m.list_objects(bucket)["items"]]


def test_worker_expires_current_versions_by_filter():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    t0 = 1_000 * S
    put(m, "b", "tmp/a", t0)
    put(m, "b", "tmp/b", t0 + 5 * S)
    put(m, "b", "tagged", t0, tg={"x": "1"})
    put(m, "b", "untagged", t0)
    put(m, "b", "big", t0, size=100)
    m.set_bucket_lifecycle("b", [
        LifecycleRule(id="tmp", prefix="tmp/", expiration_days=2),
        LifecycleRule(id="tag", filter=LifecycleFilter(tags={"x": "1"}), expiration_days=2),
        LifecycleRule(id="big", filter=LifecycleFilter(size_gt=50), expiration_days=2),
        LifecycleRule(id="off", enabled=False, filter=LifecycleFilter(), expiration_days=1)])
    assert sweep(m, Clock(t0 + S))["expired"] == 0  # nothing is 2 days old yet
    job = sweep(m, Clock(t0 + 2 * S))
    assert job["expired"] == 3 and job["state"] == "done"
    assert keys(m) == ["tmp/b", "untagged"]
    sweep(m, Clock(t0 + 7 * S))
    assert keys(m) == ["untagged"]


def test_worker_versions_markers_and_uploads():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.update_bucket("b", {"ver": "Enabled"})
    t0 = time.time_ns()  # the upload and the delete marker below take the real time
    for i in range(5):
        put(m, "b", "k", t0 + i * S)  # 4 noncurrent, made noncurrent at t0+1..t0+4
    up = m.create_upload("b", "ckpt/x", {})
    m.set_bucket_lifecycle("b", [
        LifecycleRule(id="nc", noncurrent_days=10, newer_noncurrent=1, filter=LifecycleFilter(prefix="k")),
        LifecycleRule(id="mpu", abort_upload_days=1, filter=LifecycleFilter(prefix="ckpt/"))])
    idle = sweep(m, Clock(t0 + S // 2))  # nothing is due yet
    assert idle["scanned"] == 5 and not any(idle[k] for k in ("noncurrent_expired", "uploads_aborted"))
    job = sweep(m, Clock(t0 + 12 * S + 1))  # versions made noncurrent at t0+1, t0+2 are 10 days old
    assert job["noncurrent_expired"] == 2 and job["uploads_aborted"] == 1
    assert [v[3] for v in m.list_versions("b")["items"]] == [True, False, False]
    job = sweep(m, Clock(t0 + 10 ** 6 * S))
    assert job["noncurrent_expired"] == 1  # the newest noncurrent one is kept
    with pytest.raises(errors.NoSuchUpload):
        m.get_upload("b", "ckpt/x", up)
    # a current version expires into a delete marker, which stays while older versions do
    m.set_bucket_lifecycle("b", [LifecycleRule(id="e", expiration_days=1, filter=LifecycleFilter())])
    later = Clock(t0 + 10 ** 7 * S)
    assert sweep(m, later)["expired"] == 1
    assert sweep(m, later)["delete_markers_removed"] == 0
    items = m.list_versions("b")["items"]
    assert [(v[3], v[9]) for v in items] == [(True, True), (False, False), (False, False)]  # marker on top
    # once the noncurrent versions are gone, the marker, alone and older than the rule's days, goes too
    m.set_bucket_lifecycle("b", [LifecycleRule(id="e", expiration_days=1, noncurrent_days=1,
                                               filter=LifecycleFilter())])
    job = sweep(m, later)
    assert job["noncurrent_expired"] == 2 and job["delete_markers_removed"] == 1
    assert m.list_versions("b")["items"] == []


def test_object_tags_per_version():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.update_bucket("b", {"ver": "Enabled"})
    v1 = put(m, "b", "k", S)["vid"]
    v2 = put(m, "b", "k", 2 * S)["vid"]
    assert m.set_object_tags("b", "k", {"a": "1"}, v1) == {"vid": v1}
    assert m.stat("b", "k", v1)["tg"] == {"a": "1"} and "tg" not in m.stat("b", "k")
    assert m.set_object_tags("b", "k", {"b": "2"}) == {"vid": v2}
    assert m.stat("b", "k")["tg"] == {"b": "2"}
    m.set_object_tags("b", "k", {})
    assert "tg" not in m.stat("b", "k")
    with pytest.raises(errors.NoSuchVersion):
        m.set_object_tags("b", "k", {"a": "1"}, "0" * 32)
    with pytest.raises(errors.NoSuchKey):
        m.set_object_tags("b", "nope", {"a": "1"})
    m.delete_object("b", "k")
    with pytest.raises(errors.NoSuchKey):  # the current version is a delete marker
        m.set_object_tags("b", "k", {"a": "1"})


def test_worker_skips_locked_versions():
    """Object lock: a noncurrent version under a legal hold or a retention is kept (counted as locked, not as a
    failure) and the versions after it are still expired; one whose lock the worker's clock thinks run out but the
    NameNode's command refuses (ObjectLocked) is counted as locked too."""
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.update_bucket("b", {"ver": "Enabled"})
    m.set_bucket_lock("b", {"on": True})
    t0 = time.time_ns()
    vids = [put(m, "b", "k", t0 + i * S)["vid"] for i in range(5)]  # vids[0..3] noncurrent, oldest first
    now_ms = t0 // 10 ** 6
    m.lock_object("b", "k", vids[0], legal_hold=True)
    m.lock_object("b", "k", vids[1], retention=True, mode="COMPLIANCE", until=now_ms + 10 ** 12)  # ~30 years
    m.lock_object("b", "k", vids[2], retention=True, mode="GOVERNANCE", until=now_ms + 400 * 86_400_000)
    m.set_bucket_lifecycle("b", [LifecycleRule(id="nc", noncurrent_days=1, filter=LifecycleFilter())])
    job = sweep(m, Clock(t0 + 100 * S))  # the worker's clock: 100 s on; every lock still holds
    assert job["noncurrent_expired"] == 1 and job["locked"] == 0 and job["failed"] == 0  # vids[3] only
    left = {v[2] for v in m.list_versions("b")["items"]}
    assert left == {vids[0], vids[1], vids[2], vids[4]}
    # two years on by the worker's clock, the GOVERNANCE retention looks run out: the NameNode (real time) refuses
    job = sweep(m, Clock(t0 + 2 * 365 * 86_400 * S))
    assert job["noncurrent_expired"] == 0 and job["locked"] == 1 and job["failed"] == 0
    assert {v[2] for v in m.list_versions("b")["items"]} == left
