"""Blocks in RocksDB, each stored with its CRC32C and checked on every read."""
from __future__ import annotations

import time

import orjson

from epochfs.common import errors
from awscrt.checksums import combine_crc32c

from epochfs.common.blocks import crc32c
from epochfs.common.kv import KV, prefix_end

from . import keys


# Blocks are stored as 256 KiB chunks, each with its own CRC32C: a ranged read fetches and checks only the chunks it
# touches (a 1 MiB range of a 4 MiB block reads at most 1.25 MiB, not 4), and a bad chunk is found without reading
# the rest. Measured with bench/s3_bench.py: 1 MiB chunks cost 1.5 ms of DataNode CPU per random 1 MiB range.
CHUNK_SIZE = 256 << 10
TOMBSTONE_S = 600.0


class BlockStore:
    def __init__(self, kv: KV, chunk_size: int = CHUNK_SIZE) -> None:
        self.kv = kv
        self.chunk_size = chunk_size
        self.used = 0
        self.count = 0
        self._tombstones: dict[int, float] = {}
        for _, v in kv.scan(keys.METAS, prefix_end(keys.METAS)):
            self.used += int.from_bytes(v[:8], "big")
            self.count += 1

    def _meta(self, block_id: int) -> tuple[int, int]:
        raw = self.kv.get(keys.meta(block_id))
        if raw is None:
            raise errors.NoSuchBlock(f"block {block_id} is not stored here")
        return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:12], "big")

    def put(self, block_id: int, data, crc: int, secondaries: list[tuple[int, str]] = (), *,
            jobs_due_in: float = 0.0) -> None:
        """Store a block and its replication jobs in one atomic batch; raises CorruptBlock if `crc` doesn't match.

        `jobs_due_in` delays the jobs: the caller pushes the block from memory right away and the queued jobs are
        the durable fallback if that push fails or the process dies."""
        mv = memoryview(data)
        n = len(mv)
        cs = self.chunk_size
        chunk_crcs = [crc32c(mv[i:i + cs]) for i in range(0, n, cs)]
        whole = 0
        for i, c in enumerate(chunk_crcs):
            whole = combine_crc32c(whole, c, min(cs, n - i * cs)) if i else c
        if whole != crc or (n == 0 and crc != 0):
            raise errors.CorruptBlock(f"block {block_id}: data does not match its crc32c")
        old = self.kv.get(keys.meta(block_id))
        with self.kv.batch() as b:
            b.put(keys.meta(block_id), n.to_bytes(8, "big") + crc.to_bytes(4, "big"))
            for i, c in enumerate(chunk_crcs):
                b.put(keys.chunk(block_id, i), c.to_bytes(4, "big") + mv[i * cs:(i + 1) * cs])
            now = time.time() + jobs_due_in
            for target, addr in secondaries:
                b.put(keys.repl(target, block_id), orjson.dumps({"a": addr, "n": 0, "due": now}))
        if old is None:
            self.used += n
            self.count += 1

    def _chunk(self, block_id: int, index: int) -> memoryview:
        raw = self.kv.get(keys.chunk(block_id, index))
        if raw is None:
            raise errors.NoSuchBlock(f"block {block_id} is missing chunk {index}")
        mv = memoryview(raw)
        if crc32c(mv[4:]) != int.from_bytes(mv[:4], "big"):
            raise errors.CorruptBlock(f"block {block_id} chunk {index} failed its crc32c check")
        return mv[4:]

    def read(self, block_id: int, offset: int = 0, length: int = -1) -> list[memoryview]:
        """Bytes [offset, offset+length) of a block as a list of buffers (no copy), every chunk read CRC-checked."""
        size, _ = self._meta(block_id)
        end = size if length < 0 else min(size, offset + length)
        if offset >= end:
            return []
        cs = self.chunk_size
        out = []
        for i in range(offset // cs, (end - 1) // cs + 1):
            data = self._chunk(block_id, i)
            lo, hi = max(offset - i * cs, 0), min(end - i * cs, len(data))
            out.append(data[lo:hi] if (lo, hi) != (0, len(data)) else data)
        return out

    def read_raw(self, block_id: int) -> tuple[int, list[memoryview]]:
        """(crc of the block, its chunks) after checking each chunk; for replication."""
        _, crc = self._meta(block_id)
        return crc, self.read(block_id)

    def has(self, block_id: int) -> bool:
        return self.kv.get(keys.meta(block_id)) is not None

    def recently_deleted(self, block_id: int) -> bool:
        """Was the block deleted here in the last TOMBSTONE_S seconds? A replica push that was already in flight
        when the NameNode ordered the delete must not bring it back as an orphan."""
        t = self._tombstones.get(block_id)
        return t is not None and time.monotonic() - t < TOMBSTONE_S

    def delete(self, block_ids: list[int]) -> None:
        now = time.monotonic()
        if len(self._tombstones) > 100_000:
            self._tombstones = {b: t for b, t in self._tombstones.items() if now - t < TOMBSTONE_S}
        for bid in block_ids:
            self._tombstones[bid] = now
        with self.kv.batch() as b:
            for bid in block_ids:
                raw = self.kv.get(keys.meta(bid))
                if raw is None:
                    continue
                size = int.from_bytes(raw[:8], "big")
                self.used -= size
                self.count -= 1
                b.delete(keys.meta(bid))
                for i in range(max(1, -(-size // self.chunk_size))):
                    b.delete(keys.chunk(bid, i))
        # drop replication jobs for deleted blocks
        gone = set(block_ids)
        with self.kv.batch() as b:
            for k in self.kv.scan_keys(keys.REPL, prefix_end(keys.REPL)):
                if int.from_bytes(k[5:], "big") in gone:
                    b.delete(k)

    def block_ids(self) -> list[int]:
        return [int.from_bytes(k[1:], "big") for k in self.kv.scan_keys(keys.METAS, prefix_end(keys.METAS))]

    # replication jobs
    def due_replications(self, limit: int, now: float | None = None) -> list[tuple[int, int, dict]]:
        now = time.time() if now is None else now
        out = []
        for k, v in self.kv.scan(keys.REPL, prefix_end(keys.REPL)):
            job = orjson.loads(v)
            if job["due"] <= now:
                out.append((int.from_bytes(k[1:5], "big"), int.from_bytes(k[5:], "big"), job))
                if len(out) >= limit:
                    break
        return out

    def complete(self, target: int, block_id: int) -> None:
        self.kv.delete(keys.repl(target, block_id))

    def complete_many(self, block_id: int, targets: list[int]) -> None:
        with self.kv.batch() as b:
            for t in targets:
                b.delete(keys.repl(t, block_id))

    def backoff(self, target: int, block_id: int, job: dict) -> None:
        n = job["n"] + 1
        self.kv.put(keys.repl(target, block_id),
                    orjson.dumps({**job, "n": n, "due": time.time() + min(60.0, 0.5 * 2 ** min(n, 7))}))

    def replication_lag(self) -> dict:
        """Queued replication jobs (reported with every heartbeat)."""
        return {"queued": sum(1 for _ in self.kv.scan_keys(keys.REPL, prefix_end(keys.REPL)))}
