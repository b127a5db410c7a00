"""The namespace as a state machine: every change is a command, and replaying the commands gives the same bytes."""
import random
import stat

import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV
from epochfs.common.messages import LifecycleRule
from epochfs.namenode import commands as cmds
from epochfs.namenode.access_keys import AccessKeys
from epochfs.namenode.metastore import MetaStore, now_ns
from epochfs.namenode.posix import Posix


class ListLog:
    def __init__(self) -> None:
        self.entries: list[bytes] = []

    def append(self, raw: bytes) -> None:
        self.entries.append(raw)


def dump(kv) -> dict[bytes, bytes]:
    return dict(kv.scan(b"", None))


def replay(entries: list[bytes], **kw) -> MetaStore:
    m = MetaStore(MemoryKV(), init_root=False, **kw)  # the log begins with the InitRoot of the store it came from
    for raw in entries:
        m.execute(cmds.decode(raw))
    return m


def blk(rng: random.Random, bid: int, size: int) -> list:
    return [bid, size, rng.getrandbits(32), [1, 2, 3]]


def workload(m: MetaStore, rng: random.Random, steps: int) -> int:
    """Random S3, multipart, mount, GC, node and key operations; returns how many were refused (and wrote nothing)."""
    m.create_bucket("b", "alice", {"bs": 4 << 20, "rf": 3})
    m.create_bucket("v", "alice", {"bs": 4 << 20, "rf": 3})
    m.update_bucket("v", {"ver": "Enabled"})
    keys_ = AccessKeys(m)
    keys_.create({"access_key": "AKEY1", "secret_key": "secret-secret", "buckets": {"b": "write"}})
    m.node_id_for("uuid-1")
    m.save_node(1, {"uuid": "uuid-1", "host": "h", "rpc_port": 1, "http_port": 2, "capacity": 10, "used": 0})
    fs = Posix(m)
    fs.scope(m.bucket_ino("b"), "mkdir", {})
    names = [f"d{i}/k{j}" for i in range(3) for j in range(3)] + ["top", "dir/"]
    refused = 0
    for _ in range(steps):
        op = rng.choice(["put", "put", "delete", "mpu", "quota", "mkdir", "rename", "commit", "unlink", "gc",
                         "setattr", "xattr", "key", "short", "abandon", "update", "tags"])
        bucket, key = rng.choice("bv"), rng.choice(names)
        try:
            if op == "put":
                placed = m.allocate(rng.randint(1, 3), lambda bid, i: [1 + (bid + i) % 3, 1 + (bid + i + 1) % 3])
                m.put_object(bucket, key, {"size": 10 * len(placed), "etag": f'"{rng.getrandbits(64):x}"',
                                           "blk": [[bid, 10, 7, nodes] for bid, nodes in placed]},
                             if_none_match="*" if rng.random() < 0.2 else None)
            elif op == "delete":
                m.delete_object(bucket, key, if_size=rng.choice([None, 10, 20]))
            elif op == "mpu":
                up = m.create_upload(bucket, key, {"ctype": "x"})
                for n in (1, 2):
                    (bid, nodes), = m.allocate(1, lambda bid, i: [1, 2])
                    m.put_part(bucket, key, up, n, {"size": 5, "etag": f'"{n:032x}"', "blk": [[bid, 5, 1, nodes]]})
                if rng.random() < 0.3:
                    m.abort_upload(bucket, key, up)
                else:
                    m.complete_upload(bucket, key, up, [{"n": n, "etag": f'"{n:032x}"'} for n in (1, 2)],
                                      min_part_size=1)
            elif op == "quota":
                m.update_bucket(bucket, {"qb": rng.choice([None, 25, 1000]), "qo": rng.choice([None, 3, 100])})
            elif op == "mkdir":
                fs.mkdir(m.bucket_ino("b"), rng.choice(["m1", "m2", "d0"]), 0o755, 0, 0)
            elif op == "rename":
                fs.rename(m.bucket_ino("b"), rng.choice(["top", "m1", "d1"]), m.bucket_ino("b"),
                          rng.choice(["top2", "m3", "top"]), bucket="b")
            elif op == "commit":
                f = fs.mknod(m.bucket_ino("b"), f"f{rng.randint(0, 3)}", stat.S_IFREG | 0o644, 0, 0, bucket="b")
                (bid, nodes), = m.allocate(1, lambda bid, i: [2, 3])
                fs.commit(f["ino"], [[bid, 4, 9, nodes]], 4, '"e"', bucket="b")
            elif op == "unlink":
                fs.unlink(m.bucket_ino("b"), f"f{rng.randint(0, 3)}", bucket="b")
            elif op == "setattr":
                fs.setattr(fs.lookup(m.bucket_ino("b"), f"f{rng.randint(0, 3)}")["ino"], {"mode": 0o600, "size": 0},
                           bucket="b")
            elif op == "xattr":
                fs.setxattr(fs.lookup(m.bucket_ino("b"), f"f{rng.randint(0, 3)}")["ino"], "user.k", "v")
            elif op == "gc":
                m.expire_pending(now=now_ns() + 10**18)
                m.release_freed(now=now_ns() + 10**18)
                m.garbage_done(1, m.garbage_for(1)[:2])
            elif op == "key":
                keys_.update("AKEY1", {"disabled": rng.random() < 0.5})
            elif op == "short":
                m.mark_short([(rng.randint(2, 50), 3)])
                m.drop_short([rng.randint(2, 50)])
                m.add_garbage(2, [rng.randint(2, 50)])
            elif op == "abandon":
                placed = m.allocate(2, lambda bid, i: [3])
                m.abandon([bid for bid, _ in placed])
            elif op == "update":
                m.update_object(bucket, key, {"acl": "public-read"})
            elif op == "tags":
                m.set_object_tags(bucket, key, {"k": str(rng.randint(0, 9))} if rng.random() < 0.8 else {})
                m.set_bucket_tags(bucket, rng.choice([None, {"team": "a"}]))
                m.set_bucket_lifecycle(bucket, rng.choice([None, [LifecycleRule(id="r", expiration_days=3)]]))
        except errors.DomainError:
            refused += 1
    return refused


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("grace", [0.0, 300.0])
def test_replaying_the_commands_gives_the_same_bytes(seed, grace):
    log = ListLog()
    m = MetaStore(MemoryKV(), log=log, free_grace_s=grace)
    refused = workload(m, random.Random(seed), 300)
    assert refused > 0 and len(log.entries) > 300  # preconditions did fail along the way, and wrote nothing
    ops = {cmds.decode(raw).__struct_config__.tag for raw in log.entries}
    assert {"put_object", "delete_object", "complete_upload", "rename", "commit", "update_bucket",
            "expire_pending", "allocate", "save_node", "create_access_key", "garbage_done", "set_object_tags",
            "set_bucket_tags", "set_bucket_lifecycle"} <= ops
    assert ("release_freed" in ops) == (grace > 0)
    want = dump(m.kv)
    a, b = replay(log.entries, free_grace_s=grace), replay(log.entries, free_grace_s=grace)
    assert dump(a.kv) == want
    assert dump(b.kv) == want


def test_a_refused_command_writes_nothing_and_is_refused_again_on_replay():
    log = ListLog()
    m = MetaStore(MemoryKV(), log=log)
    m.create_bucket("b", "alice")
    m.update_bucket("b", {"qb": 10})
    m.put_object("b", "k", {"size": 8, "etag": '"a"', "blk": []})
    before, n = dump(m.kv), len(log.entries)
    cmd = cmds.PutObject(bucket="b", key="k2", obj={"size": 8, "etag": '"b"', "blk": []}, t=5, vid="x")
    with pytest.raises(errors.QuotaExceeded):
        m.execute(cmd)
    assert dump(m.kv) == before and len(log.entries) == n  # not logged: it changed nothing
    r = replay(log.entries)
    with pytest.raises(errors.QuotaExceeded):
        r.execute(cmd)
    assert dump(r.kv) == before


def test_commands_round_trip_through_msgpack():
    c = cmds.ReplaceReplicas(changes=[(7, None, 3, b"I\x00\x01"), (8, 2, 4, None)])
    assert cmds.decode(cmds.encode(c)) == c
    assert cmds.decode(cmds.encode(cmds.Mkdir(bi=5, parent=5, name="d", mode=0o755, uid=0, gid=0, t=1))).name == "d"
    with pytest.raises(Exception):
        cmds.decode(b"\x81\xa2op\xa7unknown")


def test_allocate_refuses_ids_already_taken():
    m = MetaStore(MemoryKV())
    first = m.allocate(2, lambda bid, i: [1])[0][0]
    with pytest.raises(errors.Conflict):
        m.execute(cmds.Allocate(first=first, nodes=[[1]], t=1))  # placed for ids another allocation took
    assert m.allocate(1, lambda bid, i: [1])[0][0] == first + 2


def test_command_log_file(tmp_path):
    log = cmds.CommandLog(tmp_path / "cmds.log")
    m = MetaStore(MemoryKV(), log=log)
    m.create_bucket("b", "o")
    m.put_object("b", "k", {"size": 1, "etag": '"e"', "blk": []})
    log.close()
    got = list(cmds.read_log(tmp_path / "cmds.log"))
    assert [c.__struct_config__.tag for c in got] == ["init_root", "create_bucket", "put_object"]
    with open(tmp_path / "cmds.log", "ab") as f:
        f.write(b"\x00\x00\x01\x00torn")  # a crash mid-append
    assert len(list(cmds.read_log(tmp_path / "cmds.log"))) == 3
