"""Undo of unconfirmed commands (HA mode, namenode/ha/undo.py), on a real RocksDB store: commands applied and then
rolled back leave the store equal, key by key, to the store before them; re-applied from the log, they give the
same store again."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import msgspec
import pytest

from epochfs.common.kv import RocksKV, prefix_end
from epochfs.namenode import commands as cmds, keys
from epochfs.namenode.ha import undo
from epochfs.namenode.ha.journal import Journal
from epochfs.namenode.metastore import MetaStore

sys.path.insert(0, str(Path(__file__).parent))
from test_commands import workload  # noqa: E402 (the random mix of every kind of command)


def dump(kv, *, undo_records: bool = True) -> dict[bytes, bytes]:
    out = dict(kv.scan(b""))
    if not undo_records:
        out = {k: v for k, v in out.items() if not k.startswith(keys.UNDO)}
    return out


class Snapshotting(Journal):
    """Confirms commands 1..k as they come (their undo records go, as when etcd confirms a group) and keeps the
    store's contents right after command k; every later command stays unconfirmed."""

    def __init__(self, meta: MetaStore, k: int) -> None:
        self.meta, self.k = meta, k
        self.at_k: dict[bytes, bytes] | None = None
        self.after_k: list[tuple[int, cmds.Command]] = []
        self.redo: list[bytes] = []  # the redo records (what the log carries) of the commands after k

    def submit(self, seq: int, cmd, raw: bytes | None = None, writes: bytes | None = None) -> None:
        if seq <= self.k:
            undo.confirm(self.meta.kv, seq, seq)
            if seq == self.k:
                self.at_k = dump(self.meta.kv)
        else:
            self.after_k.append((seq, cmd))
            self.redo.append(writes)


@pytest.mark.parametrize("seed,replay", [(1, "commands"), (2, "commands"), (1, "writes"), (2, "writes")])
def test_rollback_restores_the_store_key_by_key_and_the_log_replays_onto_it(tmp_path, seed, replay):
    kv = RocksKV.open(tmp_path / "meta")
    try:
        meta = MetaStore(kv, undo=True, free_grace_s=300.0, init_root=False)
        j = meta.journal = Snapshotting(meta, k=120)
        meta.ensure_root()
        workload(meta, random.Random(seed), 300)
        end, end_seq = dump(kv, undo_records=False), meta.seq
        assert j.at_k is not None and end_seq > 200 and len(j.after_k) == end_seq - 120
        assert undo.pending(kv) == list(range(121, end_seq + 1))
        ops = {c.__struct_config__.tag for _, c in j.after_k}
        assert {"put_object", "delete_object", "rename", "commit", "allocate"} <= ops  # a mix worth undoing

        assert undo.rollback(kv, down_to=0) == end_seq - 120
        meta.reset()
        assert dump(kv) == j.at_k  # every key as it was after command 120, applied_seq included
        assert meta.seq == 120 and undo.pending(kv) == []

        if replay == "commands":
            for seq, cmd in j.after_k:  # the same commands from the log: the same store
                meta.apply_logged(seq, cmd)
        else:  # their redo records, in groups of 1 to 40 (one write batch each, as a standby applies the log)
            rng, i, dec = random.Random(seed), 0, msgspec.msgpack.Decoder(list[tuple[bytes, bytes | None]]).decode
            while i < len(j.redo):
                n = rng.randint(1, 40)
                meta.apply_writes(121 + i, [dec(r) for r in j.redo[i:i + n]])
                assert meta.seq == min(120 + i + n, end_seq) == meta.stored_seq()
                i += n
        assert dump(kv) == end and meta.seq == end_seq
    finally:
        kv.close()


def test_rollback_survives_a_reopen_and_a_confirmed_group_is_kept(tmp_path):
    kv = RocksKV.open(tmp_path / "meta")
    meta = MetaStore(kv, undo=True)
    meta.create_bucket("b", "alice")
    undo.confirm(kv, 1, meta.seq)
    confirmed = dump(kv)
    meta.create_bucket("c", "alice")
    meta.update_bucket("b", {"ver": "Enabled"})
    kv.close()  # a leader killed with two commands not in etcd

    kv = RocksKV.open(tmp_path / "meta")
    try:
        assert undo.rollback(kv) == 2
        meta = MetaStore(kv, undo=True)
        assert dump(kv) == confirmed and meta.seq == 2
        assert kv.get(keys.undo(3)) is None and next(iter(kv.scan(keys.UNDO, prefix_end(keys.UNDO))), None) is None
    finally:
        kv.close()


def test_log_groups_are_compressed_and_read_back_as_written():
    """A large group goes to etcd compressed and reads back equal; a small one stays plain; a group that would
    unpack past the bound (a forged or damaged value) is refused, not inflated."""
    import zlib

    from epochfs.namenode.ha import etcd_journal as ej

    entries = [ej._pack((b"cmd%d" % i, msgspec.Raw(ej._pack([(b"key%d" % i, b"v" * 200), (b"gone", None)]))))
               for i in range(20)]
    big = ej._pack_group(7, entries)
    assert big[:1] == ej.ZIP and len(big) < sum(map(len, entries)) / 3
    first, got = ej._unpack(big)
    assert first == 7 and [ej._pack(e) for e in got] == entries
    small = ej._pack_group(3, entries[:1])
    assert small[:1] != ej.ZIP and ej._unpack(small)[0] == 3
    bomb = ej.ZIP + zlib.compress(b"\x00" * (ej.MAX_GROUP_UNZIPPED + 1), 1)
    with pytest.raises(ValueError):
        ej._unpack(bomb)
