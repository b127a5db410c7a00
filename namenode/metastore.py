"""The namespace: a POSIX tree of inodes and directory entries in RocksDB, seen by S3 as buckets and keys.

A bucket is a top-level directory; the S3 key "a/b/c" is the file c in directory b in directory a. A name may be a
file and a directory at once ("a/b" and "a/b/c" are both valid S3 keys): their entries differ by the directory's
trailing slash. Directories created only to hold keys are "implicit" and vanish when they become empty; a directory
with a marker (PUT "a/b/", or mkdir) is itself listed as the key "a/b/".

The state is split by subject, one class each in namenode/meta/: namespace and listing (namespace.py), versions
(versions.py), multipart uploads (multipart.py), the block map and GC (blocks.py), DataNode records and access keys
(nodes.py), usage and quotas (usage.py). MetaStore puts them together over one KV store and owns the state machine.

Every change is a command (commands.py): a public method here builds one, with the time and random ids it needs, and
`execute` applies it through its `_apply_<op>` method, which writes one RocksDB batch (or raises a DomainError and
writes nothing). Everything runs synchronously on the NameNode's event loop, so each command is atomic with respect
to every other one and to a crash. Reads go to the store directly.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from epochfs.common.kv import KV

from . import commands as cmds, keys
from .commands import Command, CommandLog
from .keys import ROOT_INO
from .meta.blocks import BlockMap
from .meta.lock import ObjectLock
from .meta.multipart import Multipart
from .meta.namespace import Namespace
from .meta.nodes import Nodes
from .meta.records import S_IFDIR, S_IFLNK, S_IFREG, enc_record, now_ns
from .meta.usage import Usage
from .meta.versions import Versions
from .ha.undo import UndoBatch, write as write_pairs

if TYPE_CHECKING:
    from .ha.journal import Journal

__all__ = ["MetaStore", "S_IFDIR", "S_IFLNK", "S_IFREG", "enc_record", "now_ns"]


class MetaStore(Namespace, Versions, Multipart, BlockMap, Nodes, Usage, ObjectLock):
    """The NameNode's state over one KV store: reads are the subjects' methods, every change goes through execute."""

    def __init__(self, kv: KV, *, pending_grace_s: float = 3600.0, free_grace_s: float = 0.0,
                 log: CommandLog | None = None, undo: bool = False, init_root: bool = True) -> None:
        self.kv = kv
        self.pending_grace_s = pending_grace_s
        self.free_grace_s = free_grace_s  # see free_blocks
        self.log = log
        self.undo = undo  # HA mode: each batch also writes the undo record of its command (ha/undo.py)
        self.journal: Journal | None = None  # told of every command executed (ha/journal.py), once it is attached
        self.writable: Callable[[], None] | None = None  # raises NotLeader on a standby (set by the HA journal)
        self._counters: dict[bytes, int] = {}
        self._usage: dict[int, list[int]] = {}  # bucket ino -> [bytes, objects], cached from keys.usage
        self.orphans_from = keys.ORPHANS  # every orphan key below this is freed (posix.py: the reaper's start)
        from .posix import Posix  # posix.py builds on this module
        self._posix = Posix(self)  # applies the mount's commands
        self._appliers = {}
        for cls in cmds.AnyCommand.__args__:
            name = "_apply_" + cls.__struct_config__.tag
            self._appliers[cls] = getattr(self, name, None) or self._posix.applier(name)
        self.seq = self.stored_seq()
        if init_root:  # HA: only the leader creates the root, as a logged command (ensure_root)
            self.ensure_root()

    def ensure_root(self) -> None:
        if self.kv.get(keys.inode(ROOT_INO)) is None:
            self.execute(cmds.InitRoot(t=now_ns()))

    def stored_seq(self) -> int:
        """The sequence number of the last command applied to the store (0: none)."""
        raw = self.kv.get(keys.APPLIED_SEQ)
        return int.from_bytes(raw, "big") if raw else 0

    def reset(self, kv: KV | None = None) -> None:
        """The store changed under the caches (a rollback, or a store replaced by a checkpoint): read it again."""
        if kv is not None:
            self.kv = kv
        self._forget()
        self.seq = self.stored_seq()

    def _forget(self) -> None:
        """Drop what is cached from the store: read again when next needed."""
        self._counters.clear()
        self._usage.clear()
        self.orphans_from = keys.ORPHANS

    # ---------------------------------------------------------------- the state machine
    def execute(self, cmd: Command):
        """Apply one command: one write batch, or a DomainError and nothing written. Returns the command's result.
        The command gets the next sequence number (`self.seq`), written in its batch as `applied_seq`; the journal
        (if attached) is handed it, to make it durable before anyone is told of it (ha/journal.py), and it is
        appended to the command log (if any)."""
        if self.writable is not None:
            self.writable()
        raw = self.journal.admit(cmd) if self.journal is not None else None
        result, redo = self._apply(cmd, self.undo, raw)
        if self.journal is not None:
            self.journal.submit(self.seq, cmd, raw, redo)
        if self.log is not None:
            self.log.append(cmds.encode(cmd))
        return result

    def apply_logged(self, seq: int, cmd: Command) -> None:
        """Apply command `seq` read from the replicated log (a standby tailing it, a new leader catching up): the same
        apply path, no undo record (the log has it), not handed to the journal. A command from the log that fails
        here means the replicas diverged: that is raised, never skipped."""
        if seq != self.seq + 1:
            raise ValueError(f"log command {seq} applied after {self.seq}")
        self._apply(cmd, False)

    def apply_writes(self, first: int, entries: list) -> None:
        """Apply log entries `first`, `first`+1, ... given as their writes (each command's redo record, as the active
        NameNode recorded it: (key, value or None) pairs) in one write batch, `applied_seq` included: no reads, and
        the store and its applied position move together."""
        if first != self.seq + 1:
            raise ValueError(f"log command {first} applied after {self.seq}")
        last = first + len(entries) - 1
        with self.kv.batch() as b:
            for pairs in entries:
                write_pairs(b, pairs)
            b.put(keys.APPLIED_SEQ, keys.u64(last))
        self.seq = last
        self._forget()  # the caches were not told

    def _apply(self, cmd: Command, undo: bool, raw: bytes | None = None):
        """Apply `cmd` as command self.seq + 1: (its result, its redo record if `undo` else None); `raw`: its
        encoding from the journal's `admit`, for the journal's bound on what the log carries."""
        seq = self.seq + 1
        redo = None
        try:
            with self.kv.batch() as b:
                w = UndoBatch(b, self.kv) if undo else b
                result = self._appliers[type(cmd)](w, cmd)
                w.put(keys.APPLIED_SEQ, keys.u64(seq))
                if undo:
                    redo = w.redo()
                    if self.journal is not None:
                        self.journal.admit_writes(cmd, raw, redo)  # may refuse it: nothing is written then
                    b.put(keys.undo(seq), w.record())
        except BaseException:
            self._forget()  # caches a failed command may have advanced: read again from the store
            raise
        self.seq = seq
        return result, redo

    def _apply_init_root(self, b, c: cmds.InitRoot) -> None:
        b.put(keys.inode(ROOT_INO), self._enc({"t": "d", "mode": S_IFDIR | 0o755, "uid": 0, "gid": 0,
                                               "mt": c.t, "ct": c.t}))
