"""Undo records: how an HA NameNode drops commands it applied but etcd never confirmed.

The active NameNode applies a command to its RocksDB at once (later commands must see it) and appends it to etcd's log
afterwards, in a group. If it is deposed in between, those commands are in its store and in no one else's: they must
go. So in HA mode each command's batch also writes `keys.undo(seq)`, the pre-image of every key the batch writes
(read before its first write in the batch); confirmation deletes it. Rolling back applies the undo records present,
highest seq first, each in one batch, which restores the store exactly, `applied_seq` included (it is one of the keys
the batch wrote). A confirmed command whose undo record survived a crash is rolled back too and then re-applied from
the log: still correct, only slower.
"""
from __future__ import annotations

import msgspec

from epochfs.common.kv import KV, prefix_end

from .. import keys

_enc = msgspec.msgpack.Encoder().encode
_dec = msgspec.msgpack.Decoder(list[tuple[bytes, bytes | None]]).decode


class UndoBatch:
    """Wraps a command's write batch: records the pre-image of each key before its first write in the batch (the
    undo record) and the value it is left with (the redo record: what the log carries to the standbys)."""

    __slots__ = ("_b", "_kv", "pre", "post")

    def __init__(self, batch, kv: KV) -> None:
        self._b, self._kv = batch, kv
        self.pre: dict[bytes, bytes | None] = {}
        self.post: dict[bytes, bytes | None] = {}

    def _touch(self, key) -> bytes:
        key = bytes(key)
        if key not in self.pre:
            self.pre[key] = self._kv.get(key)
        return key

    def put(self, key, value) -> None:
        key = self._touch(key)
        self._b.put(key, value)
        self.post[key] = value

    def delete(self, key) -> None:
        key = self._touch(key)
        self._b.delete(key)
        self.post[key] = None

    def record(self) -> bytes:
        return _enc(list(self.pre.items()))

    def redo(self) -> bytes:
        """The command's effect as (key, value or None: deleted) pairs, applied in any order (one per key)."""
        return _enc(list(self.post.items()))


def write(batch, pairs) -> None:
    """Write (key, value or None) pairs, an undo or a redo record's, into a batch."""
    for k, v in pairs:
        if v is None:
            batch.delete(k)
        else:
            batch.put(k, v)


def pending(kv: KV) -> list[int]:
    """Sequence numbers of the commands with an undo record (not yet confirmed), in ascending order."""
    return [int.from_bytes(k[len(keys.UNDO):], "big") for k in kv.scan_keys(keys.UNDO, prefix_end(keys.UNDO))]


def confirm(kv: KV, first: int, last: int) -> None:
    """Commands first..last are in etcd's log: their undo records go (one batch)."""
    with kv.batch() as b:
        for seq in range(first, last + 1):
            b.delete(keys.undo(seq))


def rollback(kv: KV, down_to: int = 0) -> int:
    """Undo every command with an undo record above `down_to`, newest first, one batch each; returns how many.
    Callers clear the MetaStore's caches afterwards (MetaStore.rolled_back)."""
    n = 0
    for seq in reversed(pending(kv)):
        if seq <= down_to:
            break
        raw = kv.get(keys.undo(seq))
        with kv.batch() as b:
            write(b, _dec(raw))
            b.delete(keys.undo(seq))
        n += 1
    return n
