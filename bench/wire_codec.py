"""What a typed message costs on the wire: today's orjson dict header against msgspec Structs (JSON and MessagePack).

    python bench/wire_codec.py [--n 200000]

Measures, per message and in CPU microseconds, the encode of the header and the decode into the form the receiver uses
(a dict today; a typed, frozen Struct with the same short field names after the typed-contract change), for the three
messages that dominate the hot path: the `stat` reply of a one-block 110 KiB object (an S3 GET of a sample), the same
for a 32-block object (a 128 MiB shard), and a DataNode `put` request header. The figures decide the codec of
`common/messages.py`: it must cost no more CPU per call than the dicts it replaces.
"""
from __future__ import annotations

import argparse
import time

import msgspec
import orjson


class BlockRef(msgspec.Struct, frozen=True, array_like=True):
    """A block of a file, on the wire as [id, size, crc, nodes] exactly as today's lists."""
    id: int
    size: int
    crc: int
    nodes: tuple[int, ...]


class ObjectRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """An object's record with today's short keys (the names the NameNode stores) renamed to readable attributes."""
    size: int = msgspec.field(name="sz")
    etag: str = msgspec.field(name="et")
    mtime_ns: int = msgspec.field(name="mt")
    blocks: tuple[BlockRef, ...] = msgspec.field(name="blk", default=())
    content_type: str | None = msgspec.field(name="ct", default=None)
    meta: dict[str, str] = msgspec.field(name="md", default_factory=dict)
    version_id: str | None = msgspec.field(name="vid", default=None)
    ino: int = 0


class StatReply(msgspec.Struct, frozen=True):
    obj: ObjectRecord
    addrs: dict[str, str]


class PutBlock(msgspec.Struct, frozen=True, tag="put"):
    id: int
    crc: int
    targets: tuple[int, ...]
    sync: int = 0


def stat_reply(nblocks: int) -> dict:
    blk = [[1_000_000 + i, 4 << 20 if nblocks > 1 else 112_640, 0x1234ABCD, [1, 2, 3]] for i in range(nblocks)]
    return {"obj": {"sz": sum(b[1] for b in blk), "et": '"0123456789abcdef0123456789abcdef"',
                    "mt": 1_764_000_000_000_000_000, "blk": blk, "ct": "image/jpeg", "md": {"label": "n01440764"},
                    "vid": None, "ino": 123456},
            "addrs": {"1": "127.0.0.1:9101", "2": "127.0.0.1:9102", "3": "127.0.0.1:9103"}}


def per_call_us(fn, n: int) -> float:
    fn()
    t = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    n = ap.parse_args().n
    json_enc, mp_enc = msgspec.json.Encoder(), msgspec.msgpack.Encoder()
    cases = {
        "stat 1 block": (stat_reply(1), StatReply),
        "stat 32 blocks": (stat_reply(32), StatReply),
        "dn put header": ({"op": "put", "id": 1_000_007, "crc": 0x1234ABCD, "targets": [2, 3], "sync": 0}, PutBlock),
    }
    print(f"{'message':16} {'codec':22} {'bytes':>6} {'encode us':>10} {'decode us':>10} {'total us':>9}")
    for name, (d, typ) in cases.items():
        value = msgspec.convert({k: v for k, v in d.items() if k != "op"} if typ is PutBlock else d, typ)
        json_dec, mp_dec = msgspec.json.Decoder(typ), msgspec.msgpack.Decoder(typ)
        rows = [
            ("orjson dict (today)", lambda: orjson.dumps(d), orjson.loads, orjson.dumps(d)),
            ("msgspec json Struct", lambda: json_enc.encode(value), json_dec.decode, json_enc.encode(value)),
            ("msgspec msgpack Struct", lambda: mp_enc.encode(value), mp_dec.decode, mp_enc.encode(value)),
        ]
        for codec, enc, dec, wire in rows:
            assert dec(wire) == (d if codec.startswith("orjson") else value)
            e, dd = per_call_us(enc, n), per_call_us(lambda: dec(wire), n)
            print(f"{name:16} {codec:22} {len(wire):6d} {e:10.2f} {dd:10.2f} {e + dd:9.2f}")


if __name__ == "__main__":
    main()
