"""NameNode HA (issue 16): the metadata log in etcd, applied by standbys; a standby rebuilt from a peer's checkpoint;
the log truncated and etcd compacted once every member applied it. Real etcd, three real NameNode processes."""
from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import httpx
import msgspec
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ha import Etcd, HaNameNodes  # noqa: E402

from epochfs.common import errors  # noqa: E402
from epochfs.common import messages as m  # noqa: E402
from epochfs.common.clients import StandbyClient  # noqa: E402
from epochfs.namenode.ha.etcd_journal import _pack_group  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("etcd") is None, reason="no etcd binary")]


@pytest.fixture
def ha(tmp_path):
    etcd = Etcd(tmp_path).start()
    nns = HaNameNodes(tmp_path, etcd).start()
    yield nns
    nns.close()
    etcd.close()


def write(nns: HaNameNodes, i: int, bucket: str, n: int, concurrency: int = 16) -> list[str]:
    """Create `bucket` and n 0-byte objects in it through NameNode i, `concurrency` calls at a time."""
    async def go(c):
        await c.bucket_create(bucket, owner="alice")
        sem = asyncio.Semaphore(concurrency)

        async def one(k):
            async with sem:
                await c.put_object(bucket, k, m.ObjectRecord(size=0, etag='"d41d8cd98f00b204e9800998ecf8427e"',
                                                             owner="alice"))
        keys = [f"k{j:05d}" for j in range(n)]
        await asyncio.gather(*(one(k) for k in keys))
        return keys
    return nns.call(i, go)


def listed(nns: HaNameNodes, i: int, bucket: str) -> list[str]:
    async def go(c):
        out, after = [], ""
        while True:
            page = await c.list_objects(bucket, after=after)
            out += [e.key for e in page.items]
            if not page.truncated:
                return out
            after = out[-1]
    return nns.call(i, go)


def test_standbys_apply_the_log_into_stores_equal_key_by_key(ha):
    a = ha.active()
    keys = write(ha, a, "b1", 300)
    end = ha.caught_up()
    st = ha.status(a)
    assert st.mode == "etcd" and st.epoch > 0 and st.leader == ha.addr(a)
    assert end >= 300 + 2  # InitRoot, the bucket, the objects (and DataNode-free bookkeeping)
    assert len(st.members) == 3 and all(mm.lag == 0 for mm in st.members)
    stores = {i: ha.dump(i) for i in (1, 2, 3)}
    assert len(stores[a]) > 300
    for i in (1, 2, 3):
        assert stores[i] == stores[a], f"nn{i} differs from the active nn{a}"
    for i in (1, 2, 3):  # a standby serves no namespace call: it points at the active one
        if i != a:
            with pytest.raises(errors.NotLeader) as e:
                ha.call(i, lambda c: c.bucket_list())
            assert e.value.details["leader"] == ha.addr(a)
    assert listed(ha, a, "b1") == keys


def groups_applied(nns: HaNameNodes, i: int) -> dict[str, float]:
    """NameNode i's epochfs_nn_log_groups_applied_total by `via` (push, etcd)."""
    out = {}
    for line in httpx.get(f"http://127.0.0.1:{nns.ports[i][0]}/metrics", timeout=5).text.splitlines():
        if line.startswith("epochfs_nn_log_groups_applied_total{"):
            out[line.split('via="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    return out


def test_standbys_take_the_log_pushed_by_the_active_one_or_from_etcd_when_no_push_comes(tmp_path):
    """nn1 leads; nn2 gets the log groups pushed; nn3 advertises an address nothing listens on, so every push to it
    fails: it reads the log from etcd and ends with the same store. A push is only a copy: one past the next command
    is not applied (the standby reads etcd), the active one applies none, and sizes that do not add up are refused."""
    etcd = Etcd(tmp_path).start()
    nns = HaNameNodes(tmp_path, etcd, env_for={3: {"NN_ADVERTISE_HOST": "127.0.0.2"}})
    try:
        nns.start_led_by_first()
        # the active one learns of its standbys from their member records (read every 2 s, TRUNCATE_S)
        nns.wait(lambda: write(nns, 1, f"w{time.monotonic_ns()}", 1) and groups_applied(nns, 2).get("push"), 15,
                 "a push to nn2")
        before2, before3 = groups_applied(nns, 2), groups_applied(nns, 3)
        write(nns, 1, "b1", 300)
        nns.caught_up()
        assert nns.dump(2) == nns.dump(1) and nns.dump(3) == nns.dump(1)
        g2, g3 = groups_applied(nns, 2), groups_applied(nns, 3)
        pushed, read = (g2.get(v, 0) - before2.get(v, 0) for v in ("push", "etcd"))
        assert pushed >= 10 and pushed > 2 * read, (before2, g2)
        assert g3.get("push", 0) == 0 and g3.get("etcd", 0) > before3.get("etcd", 0), (before3, g3)

        def push(i: int, first: int, value: bytes, size: int | None = None) -> int:
            group = m.LogGroup(first=first, rev=1, size=len(value) if size is None else size)
            return nns.call(i, lambda c: StandbyClient(c.rpc).log_push([group], value))
        seq = nns.status(2).log_end
        junk = _pack_group(seq + 1, [msgspec.msgpack.encode(b"not a command")])
        assert push(2, seq + 50, _pack_group(seq + 50, [msgspec.msgpack.encode(b"x")])) == seq  # a gap
        assert push(1, seq + 1, junk) == seq  # the active one applies the log it writes, never a push
        with pytest.raises(errors.InvalidInput):
            push(2, seq + 1, junk, size=len(junk) + 1)
        write(nns, 1, "b2", 100)
        nns.caught_up()
        assert nns.dump(2) == nns.dump(1) and nns.dump(3) == nns.dump(1)
        assert listed(nns, 1, "b2") == [f"k{j:05d}" for j in range(100)]
    finally:
        nns.close()
        etcd.close()


def test_a_standby_with_its_data_folder_deleted_rebuilds_from_a_peer(ha):
    a = ha.active()
    s = next(i for i in (1, 2, 3) if i != a)
    write(ha, a, "b1", 100)
    ha.caught_up()
    ha.kill(s)
    shutil.rmtree(ha.root / f"nn{s}")
    write(ha, a, "b2", 100)
    # the log no longer reaches back to command 1 once the live members truncated it
    ha.wait(lambda: ha.status(a).log_first > 1, 20, "the log truncated past the dead member")
    ha.start(s)
    ha.caught_up(timeout=40)
    assert ha.dump(s) == ha.dump(a)
    assert "rebuilt from" in (ha.root / "logs" / f"nn{s}.log").read_text()


def test_a_standby_behind_a_hole_in_the_log_rebuilds_from_a_peer(ha):
    """An old group put back in etcd below newer ones after the log was truncated past it (what a late log append
    did before Etcd.put_guarded guarded on the rest of the log; test_ha_etcd_members): a standby behind it reads the
    log from there, finds a hole after that group and rebuilds from a peer's checkpoint (it retried for ever)."""
    a = ha.active()
    s = next(i for i in (1, 2, 3) if i != a)
    write(ha, a, "b1", 20)
    behind = ha.caught_up()
    ha.kill(s)
    write(ha, a, "b2", 1, concurrency=1)  # the bucket: command behind + 1, in a group of its own
    key = f"{ha.prefix}/log/{behind + 1:020d}".encode()
    group = ha.etcd.call(lambda cl: cl.get(key))
    assert group is not None
    write(ha, a, "b3", 100)
    ha.wait(lambda: ha.status(a).log_first > behind + 2, 20, "the log truncated past the dead member")
    ha.etcd.call(lambda cl: cl.put(key, group.value))  # the old group back, below the log's first
    ha.start(s)
    ha.caught_up(timeout=40)
    assert ha.dump(s) == ha.dump(a)
    text = (ha.root / "logs" / f"nn{s}.log").read_text()
    assert f"the log lacks commands {behind + 2}.." in text and "rebuilt from" in text


def test_the_log_is_truncated_once_every_member_applied_it_and_etcd_is_compacted(ha):
    a = ha.active()
    write(ha, a, "b1", 200)
    end = ha.caught_up()

    def truncated():
        st = ha.status(a)
        return st if st.log_first > 1 else None
    st = ha.wait(truncated, 20, "truncation")
    assert st.log_first <= end + 1  # never past what everyone applied
    keys = ha.etcd.ctl("get", "--prefix", "--keys-only", f"{ha.prefix}/log/").stdout.split()
    assert keys and min(int(k.rsplit("/", 1)[1]) for k in keys) == st.log_first
    # compacted: the revision the first log put had is gone from etcd's history
    out = ha.etcd.ctl("get", f"{ha.prefix}/log/", "--prefix", "--rev=2", check=False)
    assert out.returncode != 0 and "compacted" in out.stderr


def test_a_command_too_large_for_etcd_is_refused_before_it_is_applied_and_the_leader_stays(ha):
    """etcd runs with --max-request-bytes 8 MiB (its default 1.5 MiB is below a 10,000-part CompleteUpload): a 3 MiB
    command goes through and reaches the standbys; a 9 MiB one is EntityTooLarge, nothing of it is applied anywhere,
    and the same NameNode stays active in the same epoch (it used to fail in etcd on every retry and lose its lease)."""
    a = ha.active()
    epoch = ha.status(a).epoch
    meta = {f"k{j}": "v" * 100 for j in range(9)}  # ~1 KiB a record

    def batch(prefix: str, n: int) -> list[m.PutItem]:
        return [m.PutItem(key=f"{prefix}/{j:06d}", obj=m.ObjectRecord(
            size=0, etag='"d41d8cd98f00b204e9800998ecf8427e"', owner="alice", meta=meta)) for j in range(n)]

    async def put(c, prefix: str, n: int):
        if prefix == "ok":
            await c.bucket_create("big", owner="alice")
        return await c.put_objects("big", batch(prefix, n))
    done = ha.call(a, lambda c: put(c, "ok", 3000), timeout=60)
    assert len(done.done) == 3000 and all(d is not None for d in done.done) and not done.errs
    with pytest.raises(errors.EntityTooLarge) as e:
        ha.call(a, lambda c: put(c, "huge", 9000), timeout=60)
    assert "NN_ETCD_MAX_REQUEST_BYTES" in str(e.value)
    st = ha.status(a)
    assert st.role == "active" and st.epoch == epoch  # the same leadership: nothing deposed it
    ha.call(a, lambda c: c.put_object("big", "after", m.ObjectRecord(size=0, etag='"d41d8cd98f00b204e9800998ecf8427e"',
                                                                      owner="alice")))
    ha.caught_up()
    keys = listed(ha, a, "big")
    assert len(keys) == 3001 and not any(k.startswith("huge/") for k in keys)
    stores = {i: ha.dump(i) for i in (1, 2, 3)}
    for i in (1, 2, 3):
        assert stores[i] == stores[a], f"nn{i} differs from the active nn{a}"
