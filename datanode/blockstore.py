"""Blocks in RocksDB, each stored with its CRC32C and checked on every read."""
from __future__ import annotations

import time

import orjson

from epochfs.common import errors
from epochfs.common.blocks import crc32c
from epochfs.common.kv import KV, prefix_end

from . import keys


class BlockStore:
    def __init__(self, kv: KV) -> None:
        self.kv = kv
        self.used = 0
        self.count = 0
        for _, v in kv.scan(keys.BLOCKS, prefix_end(keys.BLOCKS)):
            self.used += len(v) - 4
            self.count += 1

    def put(self, block_id: int, data, crc: int, secondaries: list[tuple[int, str]] = (), *,
            jobs_due_in: float = 0.0) -> None:
        """Store a block and its replication jobs in one atomic batch; raises CorruptBlock if `crc` doesn't match.

        `jobs_due_in` delays the jobs: the caller pushes the block from memory right away and the queued jobs are
        the durable fallback if that push fails or the process dies."""
        if crc32c(data) != crc:
            raise errors.CorruptBlock(f"block {block_id}: data does not match its crc32c")
        key = keys.block(block_id)
        old = self.kv.get(key)
        with self.kv.batch() as b:
            b.put(key, crc.to_bytes(4, "big") + data)
            now = time.time() + jobs_due_in
            for target, addr in secondaries:
                b.put(keys.repl(target, block_id), orjson.dumps({"a": addr, "n": 0, "due": now}))
        if old is None:
            self.used += len(data)
            self.count += 1

    def read(self, block_id: int, offset: int = 0, length: int = -1) -> memoryview:
        raw = self.kv.get(keys.block(block_id))
        if raw is None:
            raise errors.NoSuchBlock(f"block {block_id} is not stored here")
        mv = memoryview(raw)
        data = mv[4:]
        if crc32c(data) != int.from_bytes(mv[:4], "big"):
            raise errors.CorruptBlock(f"block {block_id} failed its crc32c check")
        if offset or length >= 0:
            end = len(data) if length < 0 else min(len(data), offset + length)
            return data[offset:end]
        return data

    def read_raw(self, block_id: int) -> tuple[int, memoryview]:
        """(crc, data) after checking the crc; for replication."""
        raw = self.kv.get(keys.block(block_id))
        if raw is None:
            raise errors.NoSuchBlock(f"block {block_id} is not stored here")
        mv = memoryview(raw)
        crc = int.from_bytes(mv[:4], "big")
        if crc32c(mv[4:]) != crc:
            raise errors.CorruptBlock(f"block {block_id} failed its crc32c check")
        return crc, mv[4:]

    def has(self, block_id: int) -> bool:
        return self.kv.get(keys.block(block_id)) is not None

    def delete(self, block_ids: list[int]) -> None:
        with self.kv.batch() as b:
            for bid in block_ids:
                raw = self.kv.get(keys.block(bid))
                if raw is not None:
                    self.used -= len(raw) - 4
                    self.count -= 1
                    b.delete(keys.block(bid))
        # drop replication jobs for deleted blocks
        gone = set(block_ids)
        with self.kv.batch() as b:
            for k in self.kv.scan_keys(keys.REPL, prefix_end(keys.REPL)):
                if int.from_bytes(k[5:], "big") in gone:
                    b.delete(k)

    def block_ids(self) -> list[int]:
        return [int.from_bytes(k[1:], "big") for k in self.kv.scan_keys(keys.BLOCKS, prefix_end(keys.BLOCKS))]

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

    def backoff(self, target: int, block_id: int, job: dict) -> None:
        n = job["n"] + 1
        self.kv.put(keys.repl(target, block_id),
                    orjson.dumps({**job, "n": n, "due": time.time() + min(60.0, 0.5 * 2 ** min(n, 7))}))

    def replication_lag(self) -> dict:
        count, oldest = 0, None
        for _, v in self.kv.scan(keys.REPL, prefix_end(keys.REPL)):
            count += 1
        return {"queued": count}
