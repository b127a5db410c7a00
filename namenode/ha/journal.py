"""The journal: what makes an applied command durable before anyone is told of it.

`MetaStore.execute` applies a command to the local RocksDB at once (later commands see its effect) and hands it to
the journal; the NameNode's RPC server awaits `journal.durable(meta.seq)` before it writes any reply, reads included,
so nothing a client sees was ever un-durable. Durability is reached in groups: every command executed while one
group is being made durable goes into the next, so N concurrent callers cost about two syncs, not N. Idle, a reply
waits for nothing (everything it could have seen is durable already).

Two journals behind one interface: LocalJournal (embedded mode: the RocksDB WAL fsynced) and EtcdJournal (HA mode:
the command is in etcd's log, etcd_journal.py).
"""
from __future__ import annotations

from epochfs.common import messages as m
from epochfs.common.kv import KV, WalSync
from epochfs.namenode.commands import Command

SECRET_HEADER = "x-epochfs-secret"  # carries the cluster secret to GET /internal/checkpoint (a peer rebuilding)


class Journal:
    """The interface. `seq` numbers are MetaStore's: the n-th command the store ever applied is command n."""

    epoch = 0  # the fencing epoch stamped on orders that leave the NameNode (HA: the leader key's revision)
    stale_served = 0  # stale reads (messages.StaleOk) served as a standby, and refused as TooStale
    stale_refused = 0

    def is_active(self) -> bool:
        """Whether this NameNode serves every call (embedded: always)."""
        return True

    async def check_stale(self, want: m.StaleOk) -> None:
        """A standby: return if it may answer a stale read asking for `want` from its own store now, else raise
        TooStale (or NotLeader). The embedded NameNode is the active one: it never gets here."""
        raise NotImplementedError

    def admit(self, cmd: Command) -> bytes | None:
        """Called by MetaStore.execute before `cmd` is applied: raise a DomainError if this journal could never make
        it durable (nothing is written then). May return its encoding, handed back to `submit`."""
        return None

    def admit_writes(self, cmd: Command, raw: bytes | None, writes: bytes) -> None:
        """HA mode (MetaStore keeps undo records): called with `cmd`'s encoding (what `admit` returned) and redo record
        before its batch is written; raise a DomainError to refuse it (nothing is written then)."""

    def submit(self, seq: int, cmd: Command, raw: bytes | None = None, writes: bytes | None = None) -> None:
        """Command `seq` was just applied (called by MetaStore.execute, in order); `raw`: what `admit` returned;
        `writes`: its redo record in HA mode (the writes it made: the log carries them with the command)."""

    async def durable(self, seq: int) -> None:
        """Return once commands up to `seq` are durable; NotLeader if they never will be (a deposed leader)."""
        raise NotImplementedError

    def durable_seq(self) -> int:
        """The last command known durable."""
        raise NotImplementedError

    async def ha_state(self) -> m.HaState:
        raise NotImplementedError


class LocalJournal(Journal):
    """Embedded mode: durable = in the RocksDB WAL and fsynced. The WAL is written without sync by every batch (a
    kill -9 loses nothing, the page cache survives it); a power cut would lose what was not fsynced, so a reply waits
    for a WAL fsync that began after its command was applied. common/kv.WalSync runs one fsync at a time in a thread;
    callers arriving meanwhile share the next, so the event loop never waits for the disk."""

    def __init__(self, kv: KV, meta, name: str = "", addr: str = "") -> None:
        self._wal = WalSync(kv)
        self._meta = meta
        self.synced = meta.seq  # what a previous run applied is on disk (RocksDB syncs its WAL on a clean close,
        # and recovery replays only what reached the disk)
        self.name, self.addr = name, addr

    async def durable(self, seq: int) -> None:
        if seq <= self.synced:
            return
        covered = self._meta.seq  # applied before the sync starts, so the sync covers it
        await self._wal()
        if covered > self.synced:
            self.synced = covered

    @property
    def syncs(self) -> int:
        return self._wal.syncs

    def durable_seq(self) -> int:
        return self.synced

    async def ha_state(self) -> m.HaState:
        me = m.HaMember(name=self.name, addr=self.addr, role="embedded", applied=self.synced)
        return m.HaState(mode="embedded", name=self.name, role="embedded", leader=self.addr, log_end=self._meta.seq,
                         log_first=1, members=[me])
