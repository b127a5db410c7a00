"""What the NameNode's subjects share: inode types, the clock commands take their time from, record encoding, and
the small rules about a record's visible size and ETags."""
from __future__ import annotations

import time

import orjson

S_IFDIR = 0o040000
S_IFREG = 0o100000
S_IFLNK = 0o120000


def now_ns() -> int:
    """The time a command carries (read by whoever issues it, never while it is applied)."""
    return time.time_ns()


def enc_record(d: dict) -> bytes:
    """A record's stored bytes (JSON)."""
    return orjson.dumps(d)


def dec_record(b: bytes) -> dict:
    return orjson.loads(b)


def visible(rec: dict) -> tuple[int, int]:
    """(bytes, objects) a current version adds to its bucket's usage: nothing for a delete marker."""
    return (0, 0) if not rec or rec.get("dm") else (int(rec.get("size", 0)), 1)


def visible_summary(summary: list) -> tuple[int, int]:
    return (0, 0) if summary[5] else (int(summary[0]), 1)


def minus(pair: tuple[int, int]) -> tuple[int, int]:
    return -pair[0], -pair[1]


def norm_etag(etag: str) -> str:
    return etag.strip().strip('"')


def etag_in(etag: str | None, header: str) -> bool:
    if etag is None:
        return False
    want = norm_etag(etag)
    return any(norm_etag(e) in (want, "*") for e in header.split(","))
