#!/usr/bin/env python3
"""Header flood: what four connections streaming one endless request header cost a gateway.

Starts a gateway alone (no NameNode needed: only /healthz is asked), opens 4 connections that each send a request
line and then an endless header value in 64 KiB pieces (up to --mib MiB each), and while they do, times 10 GETs of
/healthz. Prints what each connection got through, the gateway's peak and final RSS (/proc VmHWM, VmRSS), the
gateway's CPU time (utime+stime) over the flood, and the /healthz latencies (5 s timeout).

    python bench/header_flood.py [--port 17870] [--mib 64]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

import httpx


def status(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=17870)
    ap.add_argument("--mib", type=int, default=64, help="header bytes each connection tries to send")
    args = ap.parse_args()
    url = f"http://127.0.0.1:{args.port}/healthz"
    env = {**os.environ, "GW_HOST": "127.0.0.1", "GW_PORT": str(args.port), "GW_NAMENODE": "127.0.0.1:1",
           "GW_USERS": "FLOODKEY:floodsecret"}
    gw = subprocess.Popen([sys.executable, "-m", "epochfs.gateway"], env=env, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                httpx.get(url)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        rss0, cpu0 = status(gw.pid, "VmRSS"), cpu_s(gw.pid)
        sent = [0] * 4

        def flood(i: int) -> None:
            with socket.create_connection(("127.0.0.1", args.port)) as s:
                s.sendall(b"GET /b/k HTTP/1.1\r\nHost: x\r\nx-amz-meta-a: ")
                try:
                    while sent[i] < args.mib << 20:
                        s.sendall(b"a" * 65536)
                        sent[i] += 65536
                except OSError:  # the gateway closed the connection
                    pass
        threads = [threading.Thread(target=flood, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(1)
        latencies = []
        for _ in range(10):
            t0 = time.monotonic()
            try:
                httpx.get(url, timeout=5)
                latencies.append(f"{time.monotonic() - t0:.3f}")
            except httpx.HTTPError:
                latencies.append("timeout")
        for t in threads:
            t.join()
        print(f"sent per connection (MiB): {[round(n / 2**20, 2) for n in sent]}")
        print(f"gateway RSS: {rss0:.0f} MiB before, peak {status(gw.pid, 'VmHWM'):.0f}, "
              f"after {status(gw.pid, 'VmRSS'):.0f}; CPU {cpu_s(gw.pid) - cpu0:.2f} s")
        print(f"/healthz during the flood (s): {latencies}")
    finally:
        gw.terminate()
        gw.wait()


if __name__ == "__main__":
    main()
