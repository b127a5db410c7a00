"""What the mount's read plans cost now that they are typed: the gateway's locate replies as orjson dicts read by
position (before) against msgspec Structs read by name (common/messages.py FileLocated, BatchLocated), same bytes.

    python bench/locate_codec.py [--n 2000] [--rounds 25]

Per reply, in CPU microseconds (process time, the best of `rounds` alternating rounds, so both sides see the same
machine):
  - decode: the client's decode of the reply into what the reader keeps (before: orjson.loads, then the grant
    converted into a ReadGrant; now: one msgspec decoder per reply type);
  - plan: what the mount does with it next (reader.py _keep_plan's offsets, then pieces_within of a 1 MiB read and
    the BlockReads read_pieces sends for it);
  - encode: the gateway's answer (building the pieces and the JSON).
for a 128-piece file locate (512 MiB of 4 MiB blocks, the mount's LOCATE_SPAN is 256 MiB: 64 pieces; 128 is twice
that) and a 128-item dataset-mode batch locate (one piece per small file).
"""
from __future__ import annotations

import argparse
import bisect
import time

import msgspec
import orjson

from epochfs.common import messages as m
from epochfs.common.blocks import piece_starts, pieces_within

GRANT = m.ReadGrant(blocks=list(range(1_000_000, 1_000_128)), exp=1_800_000_000, tok="ab" * 32)
ADDRS = {"1": "127.0.0.1:9101", "2": "127.0.0.1:9102", "3": "127.0.0.1:9103"}
BLOCK = 4 << 20


def blocks(n: int, size: int) -> list[m.BlockRef]:
    return [m.BlockRef(id=1_000_000 + i, size=size, crc=0x1234ABCD,
                       nodes=(1 + i % 3, 1 + (i + 1) % 3, 1 + (i + 2) % 3)) for i in range(n)]


# ------------------------------------------------------------------ before: dicts and positional lists
def old_file_encode(blk):
    pieces = [[b.id, 0, b.size, b.nodes] for b in blk]
    return orjson.dumps({"etag": '"e"', "size": len(blk) * BLOCK, "p": pieces, "addrs": ADDRS,
                         "grant": m.to_builtins(GRANT)})


def old_batch_encode(blk):
    items = [{"len": b.size, "size": b.size, "etag": "0123456789abcdef0123456789abcdef",
              "mt": 1_764_000_000_000_000_000, "p": [[b.id, 0, b.size, b.nodes]]} for b in blk]
    return orjson.dumps({"items": items, "addrs": ADDRS, "grant": m.to_builtins(GRANT)})


def old_decode(body):
    plan = orjson.loads(body)
    plan["grant"] = msgspec.convert(plan["grant"], m.ReadGrant)
    return plan


def old_pieces_within(pieces, starts, off, end):
    out = []
    for i in range(max(bisect.bisect_right(starts, off) - 1, 0), len(pieces)):
        s = starts[i]
        if s >= end:
            break
        bid, boff, n, nodes = pieces[i]
        lo, hi = max(off, s), min(end, s + n)
        if hi > lo:
            out.append([bid, boff + lo - s, hi - lo, nodes])
    return out


def old_plan(r):
    starts, pos = [], 0
    for p in r["p"]:
        starts.append(pos)
        pos += p[2]
    got = old_pieces_within(r["p"], starts, 300 << 20, (300 << 20) + (1 << 20))
    return [m.BlockRead(*p[:3]) for p in got]


def old_batch_plan(r):
    out = []
    for meta in r["items"]:
        if "p" in meta:
            pieces = meta["p"]
            starts, pos = [], 0
            for p in pieces:
                starts.append(pos)
                pos += p[2]
            out += [m.BlockRead(*p[:3]) for p in old_pieces_within(pieces, starts, 0, meta["size"])]
    return out


# ------------------------------------------------------------------ now: typed
def new_file_encode(blk):
    pieces = [m.LocatedPiece(id=b.id, offset=0, length=b.size, nodes=b.nodes) for b in blk]
    return msgspec.json.encode(m.FileLocated(etag='"e"', size=len(blk) * BLOCK, pieces=pieces, addrs=ADDRS,
                                             grant=GRANT))


def new_batch_encode(blk):
    items = [m.BatchItem(length=b.size, size=b.size, etag="0123456789abcdef0123456789abcdef",
                         mt=1_764_000_000_000_000_000, pieces=[m.LocatedPiece(id=b.id, offset=0, length=b.size,
                                                                              nodes=b.nodes)]) for b in blk]
    return msgspec.json.encode(m.BatchLocated(items=items, addrs=ADDRS, grant=GRANT))


def new_plan(r):
    got = pieces_within(r.pieces, piece_starts(r.pieces, 0), 300 << 20, (300 << 20) + (1 << 20))
    return [m.BlockRead(id=p.id, offset=p.offset, length=p.length) for p in got]


def new_batch_plan(r):
    out = []
    for item in r.items:
        if item.pieces is not None:
            got = pieces_within(item.pieces, piece_starts(item.pieces, 0), 0, item.size)
            out += [m.BlockRead(id=p.id, offset=p.offset, length=p.length) for p in got]
    return out


def per_call_us(fn, n: int) -> float:
    fn()
    t = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=25)
    a = ap.parse_args()
    file_blk, small_blk = blocks(128, BLOCK), blocks(128, 112_640)
    dec_file, dec_batch = msgspec.json.Decoder(m.FileLocated).decode, msgspec.json.Decoder(m.BatchLocated).decode
    cases = {
        "file locate, 128 pieces": (
            (lambda: old_file_encode(file_blk), old_decode, old_plan),
            (lambda: new_file_encode(file_blk), dec_file, new_plan)),
        "batch locate, 128 items": (
            (lambda: old_batch_encode(small_blk), old_decode, old_batch_plan),
            (lambda: new_batch_encode(small_blk), dec_batch, new_batch_plan)),
    }
    print(f"{'reply':24} {'form':14} {'bytes':>6} {'decode us':>10} {'plan us':>8} {'encode us':>10}")
    for name, (old, new) in cases.items():
        wire_old, wire_new = old[0](), new[0]()
        assert wire_old == wire_new, "the typed reply must have the wire bytes of the dict"
        assert old[2](old[1](wire_old)) == new[2](new[1](wire_new))
        best = {"old": [float("inf")] * 3, "new": [float("inf")] * 3}
        for _ in range(a.rounds):
            for form, (enc, dec, plan) in (("old", old), ("new", new)):
                r = dec(wire_old)
                got = (per_call_us(lambda: dec(wire_old), a.n), per_call_us(lambda: plan(r), a.n),
                       per_call_us(enc, a.n // 4))
                best[form] = [min(x, y) for x, y in zip(best[form], got)]
        for form, label in (("old", "orjson dict"), ("new", "typed Struct")):
            d, p, e = best[form]
            print(f"{name:24} {label:14} {len(wire_old):6d} {d:10.2f} {p:8.2f} {e:10.2f}")
        (od, op, oe), (nd, np_, ne) = best["old"], best["new"]
        print(f"{name:24} {'new/old':14} {'':6} {nd / od:10.2f} {np_ / op:8.2f} {ne / oe:10.2f}")


if __name__ == "__main__":
    main()
