"""CPU per call of the internal RPC (common/rpc.py): RpcClient against RpcServer in one process on loopback, so
process CPU covers both ends. Sequential calls on one connection, for request/reply payloads of a few sizes, made
with the DataNode's typed messages (has, put with two secondaries, get).

    python bench/rpc_bench.py [--calls 5000] [--rounds 3] [--track-busy]

`--track-busy`: the client keeps its calls under way, as a NameNode client in HA mode does (RpcClient.track_busy).

Prints the median of `rounds` rounds of CPU microseconds per call for each shape.
"""
from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time

import uvloop

from epochfs.common import messages as m
from epochfs.common.clients import DataNodeClient
from epochfs.common.rpc import RpcClient, RpcServer

SECRET = "bench-secret"
# (name, request payload bytes, reply payload bytes): puts are a primary's put with two secondaries, gets a whole block
SHAPES = [("small call, no payload", 0, 0), ("put 128 KiB", 128 << 10, 0), ("get 128 KiB", 0, 128 << 10),
          ("put 4 MiB", 4 << 20, 0), ("get 4 MiB", 0, 4 << 20)]
SECONDARIES = [m.Secondary(2, "127.0.0.1:7002"), m.Secondary(3, "127.0.0.1:7003")]


async def run(calls: int, rounds: int, track_busy: bool = False) -> None:
    """The DataNode's own messages and client (common/messages.py, common/clients.py) against handlers that do no
    storage work: what is measured is the RPC and the typed messages, both ends."""
    blobs = {n: bytes(n) for _, a, b in SHAPES for n in (a, b)}
    done = m.Done()

    async def has(req: m.Has, _):
        return m.HasBlocks(has=[True for _ in req.blocks])

    async def put(req: m.Put, payload):
        return done

    async def get(req: m.Get, _):
        return done, blobs[req.length]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = RpcServer({m.Has: has, m.Put: put, m.Get: get}, SECRET)
    await server.start("127.0.0.1", port)
    client = DataNodeClient(RpcClient("127.0.0.1", port, SECRET))
    if track_busy:
        client.rpc.track_busy()

    def one(req: int, reply: int):
        if req:
            return client.put(1 << 40, 0x1234ABCD, blobs[req], SECONDARIES)
        if reply:
            return client.get(1 << 40, 0, reply)
        return client.has([1 << 40])

    try:
        for name, req, reply in SHAPES:
            n = calls if req + reply < (1 << 20) else max(calls // 20, 50)
            await one(req, reply)
            per = []
            for _ in range(rounds):
                t0 = time.process_time()
                for _ in range(n):
                    await one(req, reply)
                per.append((time.process_time() - t0) / n * 1e6)
            print(f"{name:24s} {statistics.median(per):8.1f} us CPU/call  (rounds: "
                  f"{', '.join(f'{p:.1f}' for p in per)}; {n} calls each)")
    finally:
        await client.close()
        await server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--track-busy", action="store_true")
    args = ap.parse_args()
    uvloop.run(run(args.calls, args.rounds, args.track_busy))


if __name__ == "__main__":
    main()
