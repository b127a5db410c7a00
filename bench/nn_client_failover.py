"""How soon a NameNodeClient call waiting through an election completes once the new leader serves, and how many
calls it makes meanwhile, for the client's backoff cap and for a baseline cap in the same run.

Three RpcServers on loopback play the NameNodes (tests/unit/test_nn_client_ha.py's FakeNameNode): all standbys
knowing no leader, then after `--elect` seconds one becomes active and the others name it. Run:
    python bench/nn_client_failover.py [--runs 5] [--baseline-cap 1.0]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
from test_nn_client_ha import SECRET, FakeNameNode, answered_by  # noqa: E402

from epochfs.common.clients import NameNodeClient  # noqa: E402


async def one(elect_after: float, cap: float) -> tuple[float, int]:
    nns = [await FakeNameNode(f"nn{i}").start() for i in range(3)]
    c = NameNodeClient.connect(",".join(n.addr for n in nns), SECRET, retry_s=60)
    c.MAX_BACKOFF_S = cap

    async def elect() -> float:
        await asyncio.sleep(elect_after)
        nns[2].active = True
        for n in nns[:2]:
            n.leader = nns[2].addr
        return time.monotonic()
    elected, _ = await asyncio.gather(elect(), answered_by(c))
    lag = time.monotonic() - elected
    calls = sum(n.calls for n in nns)
    await c.close()
    for n in nns:
        await n.stop()
    return lag, calls


async def main(args) -> None:
    for elect in (0.5, 2.0, 5.0):
        for name, cap in (("client", NameNodeClient.MAX_BACKOFF_S), ("baseline", args.baseline_cap)):
            res = [await one(elect, cap) for _ in range(args.runs)]
            lags = sorted(r[0] * 1000 for r in res)
            print(f"election after {elect:.1f} s, {name} cap {cap:g} s: call done {lags[0]:.0f}-{lags[-1]:.0f} ms "
                  f"(median {statistics.median(lags):.0f}) after the leader serves; "
                  f"{statistics.median(r[1] for r in res):.0f} calls to the NameNodes", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-cap", type=float, default=1.0)
    asyncio.run(main(ap.parse_args()))
