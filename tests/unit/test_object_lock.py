"""Object lock in the NameNode's commands: every delete path (a lifecycle expiration calls the same DeleteObject
command as S3) and the mount's commands honour a version's lock, against the time the command carries."""
import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV
from epochfs.namenode import commands as cmds
from epochfs.namenode.metastore import MetaStore

DAY_NS = 86_400 * 10**9


def lock_store():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "owner", {"ver": "Enabled", "olk": {"on": True}})
    return m


def put(m, key, **lock):
    return m.put_object("b", key, {"size": 1, "etag": '"e"', **lock})["vid"]


def test_delete_of_a_locked_version_is_refused_at_the_commands_time():
    m = lock_store()
    t0 = 1_900_000_000 * 10**9
    vid = put(m, "k", lkm="GOVERNANCE", lku=(t0 + DAY_NS) // 10**6)
    delete = lambda t, bypass=False: m.execute(cmds.DeleteObject(  # noqa: E731
        bucket="b", key="k", t=t, vid="dm", version_id=vid, bypass=bypass))
    with pytest.raises(errors.ObjectLocked):
        delete(t0)  # what a lifecycle expiration of this version does
    assert m.stat("b", "k")["vid"] == vid
    delete(t0 + 2 * DAY_NS)  # the retention has run out by the command's time
    with pytest.raises(errors.NoSuchKey):
        m.stat("b", "k")


def test_compliance_and_legal_hold_ignore_bypass_governance_does_not():
    m = lock_store()
    far = 4_000_000_000_000
    v1 = put(m, "c", lkm="COMPLIANCE", lku=far)
    v2 = put(m, "h", lh=True)
    v3 = put(m, "g", lkm="GOVERNANCE", lku=far)
    for key, vid in (("c", v1), ("h", v2)):
        with pytest.raises(errors.ObjectLocked):
            m.delete_object("b", key, version_id=vid, bypass=True)
    with pytest.raises(errors.ObjectLocked):
        m.delete_object("b", "g", version_id=v3)
    m.delete_object("b", "g", version_id=v3, bypass=True)
    # a plain delete makes a delete marker: allowed, the locked version stays
    assert m.delete_object("b", "c")["dm"] is True
    assert m.stat("b", "c", v1)["lkm"] == "COMPLIANCE"


def test_retention_changes_follow_the_rules():
    m = lock_store()
    put(m, "k")
    now_ms = 1_900_000_000_000
    m.lock_object("b", "k", None, retention=True, mode="COMPLIANCE", until=now_ms * 2)
    for kw in ({"mode": "GOVERNANCE", "until": now_ms * 2}, {"mode": "COMPLIANCE", "until": now_ms * 2 - 1},
               {"mode": None}):
        with pytest.raises(errors.ObjectLocked):
            m.lock_object("b", "k", None, retention=True, bypass=True, **kw)
    with pytest.raises(errors.InvalidInput):  # a date in the past
        m.lock_object("b", "k", None, retention=True, mode="COMPLIANCE", until=1)
    m.lock_object("b", "k", None, retention=True, mode="COMPLIANCE", until=now_ms * 3)
    assert m.stat("b", "k")["lku"] == now_ms * 3


def test_default_retention_and_buckets_without_lock():
    m = lock_store()
    m.set_bucket_lock("b", {"on": True, "r": {"m": "GOVERNANCE", "d": 2}})
    m.put_object("b", "k", {"size": 1, "etag": '"e"', "mt": 10**18})
    rec = m.stat("b", "k")
    assert (rec["lkm"], rec["lku"]) == ("GOVERNANCE", 10**12 + 2 * 86_400_000)
    m.create_bucket("plain", "owner")
    with pytest.raises(errors.ObjectLockNotEnabled):
        m.put_object("plain", "k", {"size": 1, "etag": '"e"', "lh": True})
    with pytest.raises(errors.InvalidBucketState):
        m.set_bucket_lock("plain", {"on": True})
    with pytest.raises(errors.InvalidBucketState):
        m.update_bucket("b", {"ver": "Suspended"})


def test_mount_commands_refuse_a_locked_file():
    m = lock_store()
    put(m, "d/locked", lh=True)
    put(m, "free")
    bi = m.bucket_ino("b")
    d = m._lookup(bi, "d", True)
    t = 2_000_000_000 * 10**9
    for c in (cmds.Unlink(bi=bi, parent=d, name="locked", bucket="b", t=t),
              cmds.Rename(bi=bi, parent=d, name="locked", newparent=bi, newname="x", flags=0, bucket="b", t=t),
              cmds.Rename(bi=bi, parent=bi, name="free", newparent=d, newname="locked", flags=0, bucket="b", t=t),
              cmds.Rename(bi=bi, parent=bi, name="d", newparent=bi, newname="e", flags=0, bucket="b", t=t)):
        with pytest.raises(errors.ObjectLocked):
            m.execute(c)
    assert m.stat("b", "d/locked")["lh"] is True
    m.execute(cmds.Unlink(bi=bi, parent=bi, name="free", bucket="b", t=t))
