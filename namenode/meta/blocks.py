"""The block map and its garbage collection: allocations, freed and garbage copies, replica sets."""
from __future__ import annotations

from epochfs.common import errors
from epochfs.common.blocks import block_id, block_nodes, set_block_nodes
from epochfs.common.kv import prefix_end

from .. import commands as cmds, keys
from .base import StoreBase
from .records import now_ns


class BlockMap(StoreBase):
    """Pending (P), freed (F), garbage (G) and short (W) block records, and the block lists of files."""

    def free_blocks(self, b, blocks: list, t: int) -> None:
        """Blocks the namespace let go of at time `t` (a deleted or overwritten object, a dropped version or part):
        their copies are deleted once `free_grace_s` is over (release_freed), so that a read that started before,
        and holds the block list already, still finds them; at once without a grace."""
        if self.free_grace_s <= 0:
            for blk in blocks:
                for n in block_nodes(blk):
                    b.put(keys.garbage(n, block_id(blk)), b"")
            return
        for blk in blocks:
            for n in block_nodes(blk):
                b.put(keys.freed(t, n, block_id(blk)), b"")

    def allocate(self, count: int, choose) -> list[tuple[int, list[int]]]:
        """Reserve `count` block ids, place each with `choose(block_id, i) -> nodes`, and record them as pending.
        The placement is chosen here, before the command: the ids it gets are the counter's next ones."""
        first = self._peek(b"blk")
        nodes = [list(choose(first + i, i)) for i in range(count)]
        self.execute(cmds.Allocate(first=first, nodes=nodes, t=now_ns()))
        return [(first + i, n) for i, n in enumerate(nodes)]

    def _apply_allocate(self, b, c: cmds.Allocate) -> None:
        first = self._next(b, b"blk", len(c.nodes))
        if first != c.first:
            raise errors.Conflict(f"block ids from {c.first} were placed, the next free one is {first}")
        for i, nodes in enumerate(c.nodes):
            b.put(keys.pending(first + i), self._enc({"t": c.t, "n": nodes}))

    def not_fresh(self, blk: list, taken: set[int] = frozenset()) -> int | None:
        """The first block of a commit's `blk` that it may not take, or None: a commit over RPC takes only blocks
        still pending (allocated for it, never committed), each once; not one committed already (to this object by
        the same commit, applied before its answer was lost; or to another), nor one given back or expired (its
        copies deleted). `taken`: blocks an earlier item of the same batch took (the batch is not readable yet)."""
        seen = set()
        for x in blk:
            bid = block_id(x)
            if bid in seen or bid in taken or self.kv.get(keys.pending(bid)) is None:
                return bid
            seen.add(bid)
        return None

    @staticmethod
    def same_blocks(rec: dict | None, blk: list) -> bool:
        """Whether the stored record `rec` (an object version, a part) has exactly the blocks `blk`: a commit
        naming blocks that are no longer pending is then the one that stored `rec`, sent again."""
        return rec is not None and bool(blk) and \
            [block_id(x) for x in rec.get("blk", [])] == [block_id(x) for x in blk]

    def abandon(self, block_ids: list[int]) -> None:
        """Blocks allocated for an upload that failed: delete them from their nodes now."""
        self.execute(cmds.Abandon(block_ids=[int(x) for x in block_ids]))

    def _apply_abandon(self, b, c: cmds.Abandon) -> None:
        self.give_back(b, c.block_ids)

    def give_back(self, b, block_ids) -> None:
        """In batch `b`: those of `block_ids` still pending (allocated, never committed) become garbage."""
        for bid in block_ids:
            raw = self.kv.get(keys.pending(bid))
            if raw is None:
                continue
            for n in self._dec(raw)["n"]:
                b.put(keys.garbage(n, bid), b"")
            b.delete(keys.pending(bid))

    def _expired(self, cutoff: int) -> list[int]:
        """Pending allocations made before `cutoff` (ns)."""
        return [int.from_bytes(k[1:], "big") for k, v in self.kv.scan(keys.PENDING, prefix_end(keys.PENDING))
                if self._dec(v)["t"] < cutoff]

    def expire_pending(self, now: int | None = None) -> int:
        """Move allocations older than the grace period (uploads cut off mid-way) to garbage."""
        cutoff = (now or now_ns()) - int(self.pending_grace_s * 1e9)
        if not self._expired(cutoff):
            return 0  # the common case, every few seconds: no command
        return self.execute(cmds.ExpirePending(cutoff=cutoff))

    def _apply_expire_pending(self, b, c: cmds.ExpirePending) -> int:
        expired = self._expired(c.cutoff)
        self.give_back(b, expired)
        return len(expired)

    def _due_freed(self, cutoff: int, limit: int) -> list[bytes]:
        due = []
        for k in self.kv.scan_keys(keys.FREED, keys.freed(max(cutoff, 0), 0, 0)):
            if len(due) >= limit:
                break
            due.append(k)
        return due

    def release_freed(self, now: int | None = None, limit: int = 10_000) -> int:
        """Turn the freed copies whose grace is over into garbage (delete orders); returns how many."""
        cutoff = (now or now_ns()) - int(self.free_grace_s * 1e9)
        if not self._due_freed(cutoff, 1):
            return 0  # the common case, on every heartbeat: no command
        return self.execute(cmds.ReleaseFreed(cutoff=cutoff, limit=limit))

    def _apply_release_freed(self, b, c: cmds.ReleaseFreed) -> int:
        due = self._due_freed(c.cutoff, c.limit)
        for k in due:
            b.put(keys.garbage(int.from_bytes(k[9:13], "big"), int.from_bytes(k[13:], "big")), b"")
            b.delete(k)
        return len(due)

    def freed_on(self) -> dict[int, set[int]]:
        """node -> the copies on it that wait out their free grace (not garbage yet, not needed by any file)."""
        out: dict[int, set[int]] = {}
        for k in self.kv.scan_keys(keys.FREED, prefix_end(keys.FREED)):
            out.setdefault(int.from_bytes(k[9:13], "big"), set()).add(int.from_bytes(k[13:], "big"))
        return out

    def freed_count(self) -> int:
        return sum(1 for _ in self.kv.scan_keys(keys.FREED, prefix_end(keys.FREED)))

    def garbage_for(self, node: int, limit: int = 1000) -> list[int]:
        p = keys.garbage_of(node)
        return [int.from_bytes(k[5:], "big") for k in self.kv.scan_keys(p, prefix_end(p))][:limit]

    def garbage_done(self, node: int, block_ids: list[int]) -> None:
        self.execute(cmds.GarbageDone(node=int(node), block_ids=[int(x) for x in block_ids]))

    def _apply_garbage_done(self, b, c: cmds.GarbageDone) -> None:
        for bid in c.block_ids:
            b.delete(keys.garbage(c.node, bid))

    def garbage_count(self) -> int:
        return sum(1 for _ in self.kv.scan_keys(b"G", b"H"))

    def pending_count(self) -> int:
        return sum(1 for _ in self.kv.scan_keys(b"P", b"Q"))

    def pending_blocks(self) -> list[int]:
        """Allocated, not yet committed blocks (uploads in flight and the gateways' unused leases)."""
        return [int.from_bytes(k[1:], "big") for k in self.kv.scan_keys(b"P", b"Q")]

    def referenced_blocks(self) -> set[int]:
        """Every block id a committed file, marker or uploaded part refers to (for GC checks)."""
        out = set()
        for _, v in self.kv.scan(b"I", b"J"):
            for blk in self._dec(v).get("blk", []):
                out.add(block_id(blk))
        for lo, hi in ((b"Q", b"R"), (b"V", b"W")):  # uploaded parts and noncurrent versions
            for _, v in self.kv.scan(lo, hi):
                for blk in self._dec(v).get("blk", []):
                    out.add(block_id(blk))
        return out

    # Records that hold block lists: inodes (files), uploaded parts and noncurrent versions, in key order.
    _BLOCK_RANGES = ((b"I", b"J"), (b"Q", b"R"), (b"V", b"W"))

    def scan_block_lists(self, after: bytes = b"", limit: int = 10_000) -> tuple[list[tuple[bytes, list]], bytes | None]:
        """Up to `limit` records with blocks that sort after key `after`: ([(record key, its block list)], the key to
        pass as `after` next time, or None when the scan reached the end). For the repair worker's paced sweeps."""
        out: list[tuple[bytes, list]] = []
        for lo, hi in self._BLOCK_RANGES:
            if after >= hi:
                continue
            for k, v in self.kv.scan(max(lo, after + b"\0") if after else lo, hi):
                if len(out) >= limit:
                    return out, out[-1][0]
                blk = self._dec(v).get("blk")
                if blk:
                    out.append((k, blk))
        return out, None

    def find_block(self, bid: int, hint: bytes | None = None) -> tuple[bytes, list] | None:
        """(key of the record that refers to block `bid`, its [id, size, crc, nodes] entry), or None if nothing
        does. `hint` is where it was last seen; without it (or if it moved) every block list is scanned."""
        if hint is not None:
            raw = self.kv.get(hint)
            if raw is not None:
                for blk in self._dec(raw).get("blk", []):
                    if block_id(blk) == bid:
                        return hint, blk
        for lo, hi in self._BLOCK_RANGES:
            for k, v in self.kv.scan(lo, hi):
                for blk in self._dec(v).get("blk", []):
                    if block_id(blk) == bid:
                        return k, blk
        return None

    def replace_replicas(self, changes: list[tuple[int, int, int, bytes | None]]) -> list[bool]:
        """Confirmed re-replications, one batch: for each (block, old node, new node, hint key) the new node takes the
        old one's place in the block's replica set, and the old node's copy becomes garbage (deleted if it comes
        back). A block no file refers to any more (deleted meanwhile) makes the new copy garbage instead. Returns,
        per change, whether a replica set changed."""
        return self.execute(cmds.ReplaceReplicas(changes=[(int(bid), None if old is None else int(old), int(new), hint)
                                                          for bid, old, new, hint in changes]))

    def _apply_replace_replicas(self, b, c: cmds.ReplaceReplicas) -> list[bool]:
        records: dict[bytes, dict] = {}
        done = []
        for bid, old, new, hint in c.changes:
            found = None
            for key in ([hint] if hint is not None else []):
                rec = records.get(key) or (self._dec(raw) if (raw := self.kv.get(key)) is not None else None)
                if rec is not None and any(block_id(blk) == bid for blk in rec.get("blk", [])):
                    found = key, rec
            if found is None:
                loc = self.find_block(bid)
                if loc is not None:
                    found = loc[0], records.get(loc[0]) or self._dec(self.kv.get(loc[0]))
            if found is None:
                b.put(keys.garbage(new, bid), b"")
                done.append(False)
                continue
            key, rec = found
            records[key] = rec
            changed = False
            for blk in rec["blk"]:
                if block_id(blk) != bid:
                    continue
                nodes = block_nodes(blk)
                if old is None and new not in nodes:  # a replica added (top-up)
                    set_block_nodes(blk, [*nodes, new])
                    changed = True
                elif old in nodes and new not in nodes:
                    set_block_nodes(blk, [new if n == old else n for n in nodes])
                    b.put(keys.garbage(old, bid), b"")
                    changed = True
                elif new not in nodes:
                    b.put(keys.garbage(new, bid), b"")  # someone else replaced `old` first: a surplus copy
            done.append(changed)
        for key, rec in records.items():
            b.put(key, self._enc(rec))
        return done

    def mark_short(self, blocks: list[tuple[int, int]]) -> None:
        """Blocks written with fewer replicas than wanted ([block, wanted]): the repair worker tops them up."""
        self.execute(cmds.MarkShort(blocks=[(int(bid), int(w)) for bid, w in blocks]))

    def _apply_mark_short(self, b, c: cmds.MarkShort) -> None:
        for bid, wanted in c.blocks:
            b.put(keys.short(bid), keys.u32(wanted))

    def short_blocks(self) -> dict[int, int]:
        return {int.from_bytes(k[1:], "big"): int.from_bytes(v, "big")
                for k, v in self.kv.scan(keys.SHORT, prefix_end(keys.SHORT))}

    def drop_short(self, block_ids) -> None:
        self.execute(cmds.DropShort(block_ids=[int(x) for x in block_ids]))

    def _apply_drop_short(self, b, c: cmds.DropShort) -> None:
        for bid in c.block_ids:
            b.delete(keys.short(bid))

    def add_garbage(self, node: int, block_ids) -> None:
        """Copies on `node` that no file needs (found by reconciling its block report): delete them."""
        self.execute(cmds.AddGarbage(node=int(node), block_ids=[int(x) for x in block_ids]))

    def _apply_add_garbage(self, b, c: cmds.AddGarbage) -> None:
        for bid in c.block_ids:
            b.put(keys.garbage(c.node, bid), b"")

    def pending_on(self) -> dict[int, tuple[int, list[int]]]:
        """Allocated, not yet committed blocks: (allocation time in ns, the nodes they were placed on)."""
        return {int.from_bytes(k[1:], "big"): (rec["t"], rec["n"])
                for k, v in self.kv.scan(keys.PENDING, prefix_end(keys.PENDING)) for rec in (self._dec(v),)}

    def drop_stray_copy(self, block_id: int, node: int) -> bool:
        """A copy of `block_id` landed on `node` without a known order (it timed out, or the NameNode restarted):
        unless `node` is one of the block's holders, the copy is garbage. Returns whether it was."""
        return self.execute(cmds.DropStrayCopy(block_id=int(block_id), node=int(node)))

    def _apply_drop_stray_copy(self, b, c: cmds.DropStrayCopy) -> bool:
        loc = self.find_block(c.block_id)
        if loc is not None and c.node in block_nodes(loc[1]):
            return False
        b.put(keys.garbage(c.node, c.block_id), b"")
        return True
