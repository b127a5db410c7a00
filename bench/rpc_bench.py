"""CPU per call of the internal RPC (common/rpc.py): RpcClient against RpcServer in one process on loopback, so
process CPU covers both ends. Sequential calls on one connection, for request/reply payloads of a few sizes.

    python bench/rpc_bench.py [--calls 5000] [--rounds 3]

Prints the median of `rounds` rounds of CPU microseconds per call for each shape.
"""
from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time

import uvloop

from epochfs.common.rpc import RpcClient, RpcServer

SECRET = "bench-secret"
SHAPES = [("small call, no payload", 0, 0), ("put 128 KiB", 128 << 10, 0), ("get 128 KiB", 0, 128 << 10),
          ("put 4 MiB", 4 << 20, 0), ("get 4 MiB", 0, 4 << 20)]


async def run(calls: int, rounds: int) -> None:
    blobs = {n: bytes(n) for _, a, b in SHAPES for n in (a, b)}

    async def op(a, payload):
        return {"n": len(payload)}, blobs[a["reply"]]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = RpcServer({"op": op}, SECRET)
    await server.start("127.0.0.1", port)
    client = RpcClient("127.0.0.1", port, SECRET)
    try:
        for name, req, reply in SHAPES:
            n = calls if req + reply < (1 << 20) else max(calls // 20, 50)
            payload = blobs[req]
            await client.call("op", payload, reply=reply)
            per = []
            for _ in range(rounds):
                t0 = time.process_time()
                for _ in range(n):
                    await client.call("op", payload, reply=reply)
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
    args = ap.parse_args()
    uvloop.run(run(args.calls, args.rounds))


if __name__ == "__main__":
    main()
