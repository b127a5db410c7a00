#!/usr/bin/env python3
"""S3 benchmark: throughput and SERVER CPU per operation of epochfs, with moto's server as a peer baseline.

What it measures (one phase after the other, against each target):

    PUT 128K     PUT of N objects of 128 KiB (default 2,000; --object-kib sets another size, the phases keep
                 their names) at concurrency 16; server CPU includes the asynchronous replication to the
                 secondaries: after the last PUT answers, the benchmark polls the servers' CPU every 0.5 s and stops
                 the accounting only once it has stopped rising: two consecutive 0.5 s intervals under
                 max(2 x idle rate, 5% of the phase's CPU rate), at most 60 s ("settle" column). Replica writes
                 are thus counted in the PUT cost; the wait is not counted in the wall time / ops/s.
    GET 128K     GET of the same objects in shuffled order, concurrency 16
    HEAD         HEAD of the same objects, concurrency 16
    PUT tiny     PUT of K tiny (15 B) objects (default 10,000) in a second bucket, concurrency 16 (set-up for LIST,
                 reported too; same replication settling as PUT 128K)
    PUT 0        PUT of K empty objects (no block: the gateway and the NameNode alone) in a third bucket,
                 concurrency 16: metadata throughput (issue 16's 0-byte PUTs, with --target ha)
    LIST/1000    ListObjectsV2 of those K keys, 1,000 keys per page, following continuation tokens; the full listing
                 is repeated R times (4 at once); one op = one page of 1,000 keys
    MPU PUT      one object of B bytes (default 512 MiB) uploaded by multipart: 16 MiB parts, 4 in flight; one op = one
                 part; MB/s over create + parts + complete; CPU includes replication settling as above
    GET stream   one GET of the whole B-byte object on a single connection (recv_into a reused buffer), MB/s.
                 Right after the MPU PUT its blocks come from the DataNodes' disk (they write past the page cache),
                 so the disk bounds it (this machine's: 1.1-1.2 GB/s for `dd iflag=direct bs=4M` of a file not in
                 the host's cache, up to 2.5 GB/s when it is)
    GET stream warm   the same GET again, its blocks now in the DataNodes' page cache: the path's own speed
    RANGE 1M     M GETs (default 300) of 1 MiB at random offsets into the big object, concurrency 16
    PUT/GET 128K SSE   with --sse: PUT 128K and GET 128K again into a second bucket with SSE-S3
                 (x-amz-server-side-encryption: AES256), each right after its unencrypted twin, and the ratio of
                 server CPU per op SSE-S3 on / off printed at the end (the issue's goal: at most 1.3x)

How to run:

    python bench/s3_bench.py                          # full run, epochfs and moto (default --target both)
    python bench/s3_bench.py --quick --target epochfs # smoke run: 300 objects, 2,000 keys, 64 MiB, 100 ranges
    python bench/s3_bench.py --endpoint http://127.0.0.1:9000 --access-key AK --secret-key SK [--pids 1,2,3]
    python bench/s3_bench.py --target epochfs --phases "MPU PUT,RANGE 1M" --ranges 1000   # only these phases
    python bench/s3_bench.py --target ha --phases "PUT 0" --keys 20000 --rounds 4   # HA / embedded, 4 pairs

With --target epochfs|both the benchmark starts its own cluster (`epochfs up --data-dir <tmp> --port <free port>`,
replication 3, run as `python -m epochfs.frontends.cli.main up` = the `epochfs` console script) and stops it with
SIGTERM; the server processes are the descendants of that process (NameNode, 3 DataNodes, gateway). moto is started
as `python -m moto.server -H 127.0.0.1 -p PORT`; its one process is the server. With --endpoint the server pids come
from --pids, or are found from the listening port (/proc/net/tcp + /proc/*/fd; for an `epochfs up` cluster, all the
children of the gateway's parent); if none are found CPU accounting is skipped.

The client is not boto3: it is a lean SigV4 (UNSIGNED-PAYLOAD, own HMAC code, signing key cached) HTTP/1.1 keep-alive
client on raw asyncio streams (uvloop), run in --procs worker processes (default 2), each with an equal slice of
the concurrency and of the operations.

Columns:
    ops        operations in the phase           wall s   wall time from the first request to the last answer
    ops/s      ops / wall                         MB/s     payload bytes moved / wall (1 MB = 1e6 bytes)
    p50/p99    per-request latency, ms
    srv ms/op  server CPU (utime+stime from /proc/<pid>/stat, all threads, summed over all server processes)
               consumed between the phase's start and its end (+ replication settling for the PUT phases) / ops
    gw/nn/dn   the same split per epochfs process (dn = the 3 DataNodes together)
    srv ms/MiB server CPU per MiB of payload          cli ms/op  CPU of the benchmark's own worker processes / ops
    idle ms/s  background CPU of the idle servers (heartbeats, replicator polling), measured before the phases;
               it is included (not subtracted) in the phase numbers
In the comparison table, ratio = epochfs / moto (for CPU: < 1 means epochfs is cheaper; for ops/s, MB/s: > 1 means
epochfs is faster), and the project's targets for epochfs are shown with PASS/FAIL.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import hashlib
import hmac
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote, urlparse

from epochfs.common import ports

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

CLK_TCK = os.sysconf("SC_CLK_TCK")
SETTLE_MAX_S = 60.0  # longest wait for the servers' CPU to go quiet after a PUT phase
KiB, MiB = 1 << 10, 1 << 20

# Targets from the project's issue: (phase, kind, value); kind "cpu" = server CPU ms/op ceiling, "mbs" = MB/s floor
TARGETS = {"GET 128K": ("cpu", 1.5), "PUT 128K": ("cpu", 4.0), "LIST/1000": ("cpu", 20.0), "RANGE 1M": ("cpu", 2.0),
           "GET stream": ("mbs", 1300.0), "GET stream warm": ("mbs", 1300.0), "MPU PUT": ("mbs", 300.0)}  # issue 19

# Phases that work on what an earlier one stored (kept when only the later one is asked for with --phases)
PHASE_NEEDS = {"GET 128K": "PUT 128K", "HEAD": "PUT 128K", "LIST/1000": "PUT tiny", "GET stream": "MPU PUT",
               "GET stream warm": "GET stream", "RANGE 1M": "MPU PUT", "GET 128K SSE": "PUT 128K SSE"}
SSE_HEADER = "x-amz-server-side-encryption: AES256\r\n"

# Payloads: made in the parent before the workers fork, so every process has the same bytes.
PAYLOAD = b""   # 256 KiB of random bytes; object i of PUT 128K is PAYLOAD[off(i):off(i) + size]
PART = b""      # one multipart part; the big object is PART repeated


def small_off(i: int, size: int) -> int:
    return (i * 4099) % (len(PAYLOAD) - size + 1)


def big_slice(start: int, n: int) -> bytes:
    """Expected bytes [start, start+n) of the big object (PART repeated)."""
    ps = len(PART)
    out = bytearray()
    while n > 0:
        o = start % ps
        take = min(n, ps - o)
        out += PART[o:o + take]
        start += take
        n -= take
    return bytes(out)


# ----------------------------------------------------------------------------------------------------------- signing
def _enc(s: str) -> str:
    return quote(s, safe="-_.~")


def canon_query(params: dict) -> str:
    return "&".join(f"{_enc(k)}={_enc(str(v))}" for k, v in sorted(params.items()))


class Signer:
    """SigV4 for S3 with UNSIGNED-PAYLOAD; signs host, x-amz-content-sha256 and x-amz-date only."""

    def __init__(self, access_key: str, secret_key: str, host: str, region: str = "us-east-1") -> None:
        self.ak, self.sk, self.host, self.region = access_key, secret_key, host, region
        self._day = None
        self._key = b""
        self._sec = -1
        self._amz = ""

    def _date(self) -> str:
        now = int(time.time())
        if now != self._sec:
            self._sec = now
            self._amz = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
            day = self._amz[:8]
            if day != self._day:
                k = hmac.new(("AWS4" + self.sk).encode(), day.encode(), hashlib.sha256).digest()
                for part in (self.region, "s3", "aws4_request"):
                    k = hmac.new(k, part.encode(), hashlib.sha256).digest()
                self._day, self._key = day, k
        return self._amz

    def headers(self, method: str, path: str, query: str, sse: bool = False) -> str:
        """The signed headers of a request; `sse`: with x-amz-server-side-encryption: AES256 (signed too)."""
        amz = self._date()
        enc, enc_name = ("x-amz-server-side-encryption:AES256\n", ";x-amz-server-side-encryption") if sse else ("", "")
        creq = (f"{method}\n{path}\n{query}\nhost:{self.host}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n"
                f"x-amz-date:{amz}\n{enc}\nhost;x-amz-content-sha256;x-amz-date{enc_name}\nUNSIGNED-PAYLOAD")
        scope = f"{self._day}/{self.region}/s3/aws4_request"
        sts = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(creq.encode()).hexdigest()}"
        sig = hmac.new(self._key, sts.encode(), hashlib.sha256).hexdigest()
        return (f"Host: {self.host}\r\nx-amz-date: {amz}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n"
                + (SSE_HEADER if sse else "") +
                f"Authorization: AWS4-HMAC-SHA256 Credential={self.ak}/{scope}, "
                f"SignedHeaders=host;x-amz-content-sha256;x-amz-date{enc_name}, Signature={sig}\r\n")


# ------------------------------------------------------------------------------------------------------- HTTP client
class HTTPError(Exception):
    pass


class Conn:
    """One keep-alive HTTP/1.1 connection on asyncio streams; reconnects when the server closes it."""

    def __init__(self, tgt: dict, signer: Signer) -> None:
        self.host, self.port = tgt["host"], tgt["port"]
        self.signer = signer
        self.r = self.w = None

    async def _open(self) -> None:
        self.r, self.w = await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None

    async def request(self, method: str, path: str, params: dict | None = None, body=b"", extra: str = "",
                      sse: bool = False):
        """-> (status, headers dict with lower-case names, body bytes)."""
        q = canon_query(params) if params else ""
        for attempt in (0, 1):
            fresh = self.w is None
            if fresh:
                await self._open()
            clen = f"Content-Length: {len(body)}\r\n" if method in ("PUT", "POST") else ""
            head = (f"{method} {path}{'?' + q if q else ''} HTTP/1.1\r\n{self.signer.headers(method, path, q, sse)}"
                    f"{extra}{clen}\r\n").encode()
            try:
                if len(body) <= 256 * KiB:
                    self.w.write(head + body if body else head)
                else:
                    self.w.write(head)
                    self.w.write(body)
                    await self.w.drain()
                return await self._response(method == "HEAD")
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                self.close()
                if fresh or attempt:
                    raise
        raise AssertionError("unreachable")

    async def _response(self, head_req: bool):
        r = self.r
        raw = await r.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status_line = lines[0]
        status = int(status_line.split(b" ", 2)[1])
        hdrs = {}
        for ln in lines[1:]:
            if ln:
                k, _, v = ln.partition(b":")
                hdrs[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        close = status_line.startswith(b"HTTP/1.0") or hdrs.get("connection", "").lower() == "close"
        if head_req or status in (204, 304) or status < 200:
            body = b""
        elif "chunked" in hdrs.get("transfer-encoding", "").lower():
            parts = []
            while True:
                n = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
                if n == 0:
                    while (await r.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    break
                parts.append(await r.readexactly(n))
                await r.readexactly(2)
            body = b"".join(parts)
        elif "content-length" in hdrs:
            body = await r.readexactly(int(hdrs["content-length"]))
        else:
            body = await r.read(-1)
            close = True
        if close:
            self.close()
        return status, hdrs, body


def expect(status: int, want: int, body: bytes, what: str) -> None:
    if status != want:
        raise HTTPError(f"{what}: HTTP {status} (want {want}): {body[:300]!r}")


# ------------------------------------------------------------------------------------------------------ worker side
async def _run_ops(tgt: dict, conc: int, items: list, op) -> tuple[list, int, int, list]:
    """Run op(conn, item) -> bytes moved over items with `conc` connections. -> (latencies, bytes, errors, samples)"""
    signer = Signer(tgt["ak"], tgt["sk"], f"{tgt['host']}:{tgt['port']}")
    it = iter(items)
    lat: list[float] = []
    state = {"bytes": 0, "errors": 0}
    samples: list[str] = []

    async def loop():
        c = Conn(tgt, signer)
        try:
            for item in it:
                t = time.perf_counter()
                try:
                    moved = await op(c, item)
                except Exception as e:  # noqa: BLE001 -- counted and reported
                    state["errors"] += 1
                    c.close()
                    if len(samples) < 3:
                        samples.append(f"{type(e).__name__}: {e}"[:400])
                    continue
                lat.append(time.perf_counter() - t)
                state["bytes"] += moved
        finally:
            c.close()

    await asyncio.gather(*(loop() for _ in range(max(1, conc))))
    return lat, state["bytes"], state["errors"], samples


def _op_put(bucket, size, sse=False):
    async def op(c, i):
        off = small_off(i, size)
        st, h, b = await c.request("PUT", f"/{bucket}/obj-{i:07d}", body=PAYLOAD[off:off + size], sse=sse)
        expect(st, 200, b, "PUT")
        if sse and h.get("x-amz-server-side-encryption") != "AES256":
            raise HTTPError(f"PUT obj-{i}: not encrypted ({h.get('x-amz-server-side-encryption')})")
        return size
    return op


def _op_get(bucket, size, verify_every=50):
    async def op(c, i):
        st, _, b = await c.request("GET", f"/{bucket}/obj-{i:07d}")
        expect(st, 200, b, "GET")
        if len(b) != size:
            raise HTTPError(f"GET obj-{i}: {len(b)} bytes, want {size}")
        if i % verify_every == 0:
            off = small_off(i, size)
            if b != PAYLOAD[off:off + size]:
                raise HTTPError(f"GET obj-{i}: content mismatch")
        return len(b)
    return op


def _op_head(bucket, size):
    async def op(c, i):
        st, h, b = await c.request("HEAD", f"/{bucket}/obj-{i:07d}")
        expect(st, 200, b, "HEAD")
        if int(h.get("content-length", -1)) != size:
            raise HTTPError(f"HEAD obj-{i}: content-length {h.get('content-length')}")
        return 0
    return op


def _op_put_zero(bucket):
    async def op(c, i):
        st, _, b = await c.request("PUT", f"/{bucket}/zero-{i:07d}", body=b"")
        expect(st, 200, b, "PUT 0")
        return 0
    return op


def _op_put_tiny(bucket):
    async def op(c, i):
        st, _, b = await c.request("PUT", f"/{bucket}/key-{i:07d}", body=b"tiny-%010d" % i)
        expect(st, 200, b, "PUT tiny")
        return 15
    return op


_TOKEN = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")
_KEYCOUNT = re.compile(rb"<KeyCount>(\d+)</KeyCount>")


async def _list_all(tgt: dict, bucket: str, want: int, pages_out: list) -> tuple[list, int, int, list]:
    signer = Signer(tgt["ak"], tgt["sk"], f"{tgt['host']}:{tgt['port']}")
    c = Conn(tgt, signer)
    lat, nbytes, keys, token = [], 0, 0, None
    try:
        for _ in range(want // 1000 + 5):
            params = {"list-type": "2", "max-keys": "1000"}
            if token:
                params["continuation-token"] = token
            t = time.perf_counter()
            st, _, b = await c.request("GET", f"/{bucket}", params)
            lat.append(time.perf_counter() - t)
            expect(st, 200, b, "LIST")
            nbytes += len(b)
            m = _KEYCOUNT.search(b)
            keys += int(m.group(1)) if m else b.count(b"<Key>")
            t = _TOKEN.search(b)
            if b"<IsTruncated>true</IsTruncated>" not in b or not t:
                break
            token = t.group(1).decode().replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    finally:
        c.close()
    pages_out.append(len(lat))
    if keys != want:
        return lat, nbytes, 1, [f"listing returned {keys} keys, want {want}"]
    return lat, nbytes, 0, []


async def _mpu(tgt: dict, bucket: str, key: str, total: int, part_size: int, conc: int):
    signer = Signer(tgt["ak"], tgt["sk"], f"{tgt['host']}:{tgt['port']}")
    c0 = Conn(tgt, signer)
    path = f"/{bucket}/{key}"
    st, _, b = await c0.request("POST", path, {"uploads": ""})
    expect(st, 200, b, "CreateMultipartUpload")
    upload_id = re.search(rb"<UploadId>([^<]+)</UploadId>", b).group(1).decode()
    nparts = (total + part_size - 1) // part_size
    etags: dict[int, str] = {}
    part_mv = memoryview(PART)

    async def op(c, n):
        size = min(part_size, total - (n - 1) * part_size)
        st, h, b = await c.request("PUT", path, {"partNumber": str(n), "uploadId": upload_id}, body=part_mv[:size])
        expect(st, 200, b, f"UploadPart {n}")
        etags[n] = h["etag"]
        return size

    lat, nbytes, errs, samples = await _run_ops(tgt, conc, list(range(1, nparts + 1)), op)
    if errs:
        return lat, nbytes, errs, samples
    xml = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{etags[n]}</ETag></Part>" for n in sorted(etags)) + \
        "</CompleteMultipartUpload>"
    st, _, b = await c0.request("POST", path, {"uploadId": upload_id}, body=xml.encode())
    c0.close()
    if st != 200 or b"<Error>" in b:
        return lat, nbytes, 1, [f"CompleteMultipartUpload: HTTP {st} {b[:300]!r}"]
    return lat, nbytes, 0, []


def _op_range(bucket, key, total, n, verify_every=10):
    async def op(c, j):
        start = j[1]
        st, _, b = await c.request("GET", f"/{bucket}/{key}", extra=f"Range: bytes={start}-{start + n - 1}\r\n")
        expect(st, 206, b, "ranged GET")
        if len(b) != n:
            raise HTTPError(f"ranged GET at {start}: {len(b)} bytes, want {n}")
        if j[0] % verify_every == 0 and b != big_slice(start, n):
            raise HTTPError(f"ranged GET at {start}: content mismatch")
        return n
    return op


def _stream_get(tgt: dict, bucket: str, key: str, total: int):
    """One GET of the whole object on a blocking socket, body read with recv_into into a reused 4 MiB buffer."""
    signer = Signer(tgt["ak"], tgt["sk"], f"{tgt['host']}:{tgt['port']}")
    path = f"/{bucket}/{key}"
    s = socket.create_connection((tgt["host"], tgt["port"]))
    buf = bytearray(4 * MiB)
    mv = memoryview(buf)
    try:
        t0 = time.perf_counter()
        s.sendall(f"GET {path} HTTP/1.1\r\n{signer.headers('GET', path, '')}\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            if not chunk:
                raise HTTPError("connection closed before the response headers")
            head += chunk
        hdr, _, rest = head.partition(b"\r\n\r\n")
        status = int(hdr.split(b" ", 2)[1])
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", hdr)
        if status != 200:
            raise HTTPError(f"stream GET: HTTP {status} {rest[:300]!r}")
        want = int(m.group(1)) if m else None
        got = len(rest)
        first = rest[:MiB]
        ttfb = time.perf_counter() - t0
        while want is None or got < want:
            n = s.recv_into(mv)
            if n == 0:
                break
            if len(first) < MiB:
                first += bytes(mv[:min(n, MiB - len(first))])
            got += n
        lat = time.perf_counter() - t0
    finally:
        s.close()
    if want is not None and got != want or got != total:
        return [lat], got, 1, [f"stream GET: {got} bytes, want {total}"]
    if first != big_slice(0, len(first)):
        return [lat], got, 1, ["stream GET: content mismatch in the first MiB"]
    return [lat], got, 0, [f"ttfb {ttfb * 1e3:.1f} ms"]


def run_task(task: dict) -> dict:
    """Executed in a worker process: one slice of one phase."""
    kind, tgt = task["kind"], task["tgt"]
    loop_new = (lambda c: uvloop.run(c)) if uvloop is not None else asyncio.run
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    extra = {}
    if kind == "put":
        res = loop_new(_run_ops(tgt, task["conc"], task["items"], _op_put(task["bucket"], task["size"],
                                                                          task.get("sse", False))))
    elif kind == "get":
        res = loop_new(_run_ops(tgt, task["conc"], task["items"], _op_get(task["bucket"], task["size"])))
    elif kind == "head":
        res = loop_new(_run_ops(tgt, task["conc"], task["items"], _op_head(task["bucket"], task["size"])))
    elif kind == "put_tiny":
        res = loop_new(_run_ops(tgt, task["conc"], task["items"], _op_put_tiny(task["bucket"])))
    elif kind == "put_zero":
        res = loop_new(_run_ops(tgt, task["conc"], task["items"], _op_put_zero(task["bucket"])))
    elif kind == "list":
        pages: list[int] = []

        async def many():
            out = await asyncio.gather(*(_list_all(tgt, task["bucket"], task["want"], pages)
                                         for _ in range(task["reps"])))
            return ([x for o in out for x in o[0]], sum(o[1] for o in out), sum(o[2] for o in out),
                    [s for o in out for s in o[3]])
        res = loop_new(many())
    elif kind == "mpu":
        res = loop_new(_mpu(tgt, task["bucket"], task["key"], task["total"], task["part"], task["conc"]))
    elif kind == "range":
        res = loop_new(_run_ops(tgt, task["conc"], task["items"],
                                _op_range(task["bucket"], task["key"], task["total"], task["n"])))
    elif kind == "stream":
        res = _stream_get(tgt, task["bucket"], task["key"], task["total"])
    elif kind == "bucket":
        async def mk():
            c = Conn(tgt, Signer(tgt["ak"], tgt["sk"], f"{tgt['host']}:{tgt['port']}"))
            st, _, b = await c.request("PUT", f"/{task['bucket']}")
            c.close()
            if st != 200 and b"BucketAlreadyOwnedByYou" not in b:
                raise HTTPError(f"CreateBucket {task['bucket']}: HTTP {st} {b[:300]!r}")
            return [], 0, 0, []
        res = loop_new(mk())
    else:
        raise ValueError(kind)
    t1 = time.perf_counter()
    lat, nbytes, errs, samples = res
    return {"t0": t0, "t1": t1, "cpu": time.process_time() - cpu0, "lat": lat, "bytes": nbytes, "errors": errs,
            "samples": samples, "n": len(lat), **extra}


def _worker_main(conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            conn.send(run_task(task))
        except Exception as e:  # noqa: BLE001
            conn.send({"fatal": f"{type(e).__name__}: {e}"})


class Workers:
    """N persistent forked worker processes; run() gives each one its task and waits for all."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("fork")
        self.pipes, self.procs = [], []
        for _ in range(n):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(b,), daemon=True)
            p.start()
            self.pipes.append(a)
            self.procs.append(p)

    def run(self, tasks: list[dict]) -> list[dict]:
        assert len(tasks) <= len(self.pipes)
        for pipe, t in zip(self.pipes, tasks):
            pipe.send(t)
        out = [pipe.recv() for pipe, _ in zip(self.pipes, tasks)]
        for o in out:
            if "fatal" in o:
                raise RuntimeError(f"worker failed: {o['fatal']}")
        return out

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()


# ---------------------------------------------------------------------------------------------- server CPU accounting
def proc_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def thread_ticks(pid: int) -> dict[str, int]:
    """utime+stime per thread name (comm: python3.11 = interpreter threads, rocksdb:low/high, libuv-worker...)."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        comm = data[data.index(b"(") + 1:data.rindex(b")")].decode(errors="replace")
        fields = data[data.rindex(b")") + 2:].split()
        out[comm] = out.get(comm, 0) + int(fields[11]) + int(fields[12])
    return out


def children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    for _ in range(10000):
        if not todo:
            break
        for c in children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError):
        return 0


def epochfs_servers(up_pid: int) -> dict[str, int]:
    """name -> pid for the service processes under an `epochfs up` process."""
    names: dict[str, int] = {}
    for pid in sorted(descendants(up_pid)):
        m = re.search(r"epochfs\.(namenode|datanode|gateway)|^\S*(etcd)\s", cmdline(pid))
        if m:  # (`epochfs up --ha`: 3 NameNodes and 3 etcd members)
            kind = m.group(1) or m.group(2)
            names[f"{kind}{sum(n.startswith(kind) for n in names) + 1}"] = pid
    return names


def pid_listening_on(port: int) -> int | None:
    """The pid owning the TCP socket listening on 127.0.0.1/0.0.0.0:port (needs read access to /proc/*/fd)."""
    inodes = set()
    for fn in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(fn) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(parts[9])
        except OSError:
            pass
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{d}/fd"):
                try:
                    if os.readlink(f"/proc/{d}/fd/{fd}") in targets:
                        return int(d)
                except OSError:
                    pass
        except OSError:
            pass
    return None


class CpuMeter:
    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    def snap(self) -> dict[str, int]:
        return {n: proc_ticks(p) or 0 for n, p in self.pids.items()}

    @staticmethod
    def delta(a: dict, b: dict) -> dict[str, float]:
        return {n: (b[n] - a[n]) / CLK_TCK for n in a}

    def total(self) -> int:
        return sum(self.snap().values())

    def settle(self, quiet_ticks: float, interval: float = 0.5, max_s: float = 0.0) -> float:
        """Wait until the servers' CPU stops rising: two consecutive `interval`s with <= quiet_ticks. -> seconds."""
        max_s = max_s or SETTLE_MAX_S
        t0 = time.perf_counter()
        last = self.total()
        quiet = 0
        while time.perf_counter() - t0 < max_s:
            time.sleep(interval)
            now = self.total()
            quiet = quiet + 1 if now - last <= quiet_ticks else 0
            last = now
            if quiet >= 2:
                break
        return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------------------ the targets
def wait_port(host: str, port: int, deadline: float, proc: subprocess.Popen | None = None) -> None:
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(16).startswith(b"HTTP/"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {host}:{port}")


class Target:
    name = ""
    tgt: dict
    pids: dict[str, int]
    note = ""

    def stop(self) -> None:
        pass


class EpochfsTarget(Target):
    name = "epochfs"

    def __init__(self, keep: bool = False, ha: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="epochfs-bench-")
        self.keep, self.ha = keep, ha
        if ha:
            self.name = "epochfs-ha"
        port = self.port = ports.free_block(30 if ha else 20)
        self.log = open(os.path.join(self.dir, "up.log"), "ab")
        # == `epochfs up --data-dir DIR --port PORT` (the console script's entry point), replication 3
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochfs.frontends.cli.main", "up", "--data-dir", os.path.join(self.dir, "data"),
             "--port", str(port), "--host", "127.0.0.1", "--replication", "3", "--log-level", "warning"]
            + (["--ha"] if ha else []),
            stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 90
        line = ""
        os.set_blocking(self.proc.stdout.fileno(), False)
        buf = b""
        while time.monotonic() < deadline and "export AWS_ENDPOINT_URL=" not in line:
            if self.proc.poll() is not None:
                raise RuntimeError(f"epochfs up exited ({self.proc.returncode}); see {self.dir}/up.log")
            try:
                chunk = self.proc.stdout.read()
            except BlockingIOError:
                chunk = None
            if chunk:
                buf += chunk
                for ln in buf.decode(errors="replace").splitlines():
                    if ln.startswith("export AWS_ENDPOINT_URL="):
                        line = ln
            time.sleep(0.1)
        if not line:
            self.stop()
            raise RuntimeError("epochfs up did not print its export line in 90 s")
        env = dict(kv.split("=", 1) for kv in line[len("export "):].split())
        u = urlparse(env["AWS_ENDPOINT_URL"])
        self.tgt = {"host": u.hostname, "port": u.port, "ak": env["AWS_ACCESS_KEY_ID"],
                    "sk": env["AWS_SECRET_ACCESS_KEY"]}
        self.pids = epochfs_servers(self.proc.pid)
        if len(self.pids) != (10 if ha else 5):
            print(f"# warning: found {len(self.pids)} epochfs server processes: {self.pids}", file=sys.stderr)
        self.note = f"epochfs up pid {self.proc.pid}, servers {self.pids}, data {self.dir}"

    def dn_blocks(self) -> str:
        """Blocks per DataNode from their /healthz (ports: gateway + 10 + 2i, see cluster_ports in the CLI)."""
        counts = []
        for i in range(3):
            try:
                with socket.create_connection(("127.0.0.1", self.port + 10 + 2 * i), timeout=5) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    data = b""
                    while chunk := s.recv(65536):
                        data += chunk
                counts.append(json.loads(data.partition(b"\r\n\r\n")[2])["blocks"])
            except (OSError, ValueError, KeyError):
                counts.append(None)
        return f"{sum(c or 0 for c in counts)} {counts}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


class MotoTarget(Target):
    name = "moto"

    def __init__(self) -> None:
        port = ports.free_block(1)
        self.logf = tempfile.NamedTemporaryFile(prefix="moto-bench-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=self.logf, stderr=self.logf, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        wait_port("127.0.0.1", port, time.monotonic() + 60, self.proc)
        self.tgt = {"host": "127.0.0.1", "port": port, "ak": "testing", "sk": "testing"}
        self.pids = {"moto": self.proc.pid}
        self.note = f"moto.server pid {self.proc.pid}, log {self.logf.name}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.logf.name)


class ExternalTarget(Target):
    def __init__(self, endpoint: str, ak: str, sk: str, pids: str | None) -> None:
        u = urlparse(endpoint)
        self.name = "external"
        self.tgt = {"host": u.hostname, "port": u.port or 80, "ak": ak, "sk": sk}
        self.pids = {}
        if pids:
            for i, p in enumerate(pids.split(",")):
                self.pids[f"{cmdline(int(p)).split(' -m ')[-1].split()[0] if ' -m ' in cmdline(int(p)) else 'pid'}"
                          f"#{p}"] = int(p)
            self.note = f"server pids from --pids: {self.pids}"
        else:
            pid = pid_listening_on(self.tgt["port"])
            if pid is None:
                self.note = "no server pid found from the port: CPU accounting skipped"
            else:
                parent = ppid(pid)
                if parent and re.search(r"epochfs.*\bup\b", cmdline(parent)):
                    self.pids = epochfs_servers(parent)
                    self.note = f"epochfs up pid {parent} found from the port; servers {self.pids}"
                else:
                    self.pids = {"server": pid}
                    self.note = f"only the listening process {pid} is accounted ({cmdline(pid)[:80]})"


# ------------------------------------------------------------------------------------------------------- the phases
def split(items: list, n: int) -> list[list]:
    return [items[i::n] for i in range(n)]


def start_profilers(pids: dict[str, int], outdir: str, phase: str, native: bool, perf: bool = False) -> list:
    """py-spy record (or with perf=True one `perf record -g` over all of them) on every server process for the
    duration of one phase; stopped with SIGINT."""
    os.makedirs(outdir, exist_ok=True)
    spies = []
    if perf:
        out = os.path.join(outdir, f"{phase.replace(' ', '_').replace('/', '_')}.perf.data")
        spies.append(subprocess.Popen(["perf", "record", "-F", "499", "-g", "-o", out, "-p",
                                       ",".join(str(p) for p in pids.values())],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.5)
        return spies
    for name, pid in pids.items():
        out = os.path.join(outdir, f"{phase.replace(' ', '_').replace('/', '_')}.{name}.txt")
        cmd = ["py-spy", "record", "--pid", str(pid), "--rate", "100", "--format", "raw", "-o", out]
        cmd += ["--native"] if native else ["--nonblocking"]
        spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.5)  # let py-spy attach before the load starts
    return spies


def stop_profilers(spies: list) -> None:
    for p in spies:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in spies:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _is_idle(frames: list[str]) -> bool:
    """Samples of a thread waiting for work: the event loop in epoll (py-spy shows it as Runner.run without
    --native, as epoll_pwait with it), or an idle thread-pool worker blocked on its queue."""
    leaf = frames[-1]
    if leaf.startswith(("epoll_pwait", "epoll_wait", "Runner.run (")):
        return True
    return any(f.startswith("_worker (futures/thread.py") for f in frames) and \
        not any(f.startswith("run (futures/thread.py") for f in frames)


def profile_summary(outdir: str, top: int = 12) -> None:
    """Self and inclusive shares per function from py-spy raw files, as % of the busy (non-idle) samples."""
    for fn in sorted(os.listdir(outdir)):
        if not fn.endswith(".txt"):
            continue
        selfc: dict[str, int] = {}
        incl: dict[str, int] = {}
        total = idle = 0
        with open(os.path.join(outdir, fn)) as f:
            for line in f:
                stack, _, cnt = line.rstrip("\n").rpartition(" ")
                if not stack or not cnt.isdigit():
                    continue
                n = int(cnt)
                frames = []
                for fr in stack.split(";"):
                    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", fr)
                    name = fr if not m else f"{m.group(1)} ({'/'.join(m.group(2).split('/')[-2:])})"
                    frames.append(name)
                if not frames:
                    continue
                if _is_idle(frames):
                    idle += n
                    continue
                total += n
                selfc[frames[-1]] = selfc.get(frames[-1], 0) + n
                for name in set(frames):
                    incl[name] = incl.get(name, 0) + n
        if not total:
            continue
        print(f"\n== profile {fn}: {total} busy samples at 100 Hz ({idle} idle samples dropped); % of busy samples")
        print("   self%  function")
        for name, c in sorted(selfc.items(), key=lambda x: -x[1])[:top]:
            print(f"   {100 * c / total:5.1f}  {name}")
        print("   incl%  function (frames on >= 85% of the busy stacks left out)")
        for name, c in [x for x in sorted(incl.items(), key=lambda x: -x[1]) if x[1] < 0.85 * total][:top]:
            print(f"   {100 * c / total:5.1f}  {name}")


def run_phase(name: str, target: Target, workers: Workers, tasks: list[dict], meter: CpuMeter | None,
              settle: bool, idle_ticks: float, ops_unit: int = 1, profile: tuple | None = None) -> dict:
    spies = start_profilers(target.pids, profile[0], name, profile[1], profile[2]) if profile else []
    th0 = {n: thread_ticks(p) for n, p in target.pids.items()} if profile else {}
    s0 = meter.snap() if meter else None
    out = workers.run(tasks)
    settle_s = 0.0
    if meter and settle:
        # quiet = an interval whose CPU is within 2x the idle rate, or below 5% of the phase's own rate (some
        # background work, e.g. RocksDB compaction or the replicator's polling, can stay above idle for minutes)
        t_run = max(max(o["t1"] for o in out) - min(o["t0"] for o in out), 1e-3)
        phase_ticks_per_interval = (meter.total() - sum(s0.values())) / t_run * 0.5
        settle_s = meter.settle(quiet_ticks=max(idle_ticks, 0.05 * phase_ticks_per_interval))
    s1 = meter.snap() if meter else None
    if profile:
        split_s = []
        for n, p in target.pids.items():
            th1 = thread_ticks(p)
            d = {c: (v - th0[n].get(c, 0)) / CLK_TCK for c, v in th1.items() if v - th0[n].get(c, 0) > 0}
            split_s.append(f"{n}: " + ", ".join(f"{c} {v:.2f}s" for c, v in sorted(d.items(), key=lambda x: -x[1])))
        print(f"#   {name} CPU per thread name: " + " | ".join(split_s), flush=True)
    stop_profilers(spies)
    t0, t1 = min(o["t0"] for o in out), max(o["t1"] for o in out)
    lat = sorted(x for o in out for x in o["lat"])
    ops = sum(o["n"] for o in out) // ops_unit
    nbytes = sum(o["bytes"] for o in out)
    errs = sum(o["errors"] for o in out)
    samples = [s for o in out for s in o["samples"]]
    wall = max(t1 - t0, 1e-9)
    r = {"phase": name, "ops": ops, "wall": wall, "ops_s": ops / wall, "mb_s": nbytes / wall / 1e6, "bytes": nbytes,
         "p50": lat[len(lat) // 2] * 1e3 if lat else 0, "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3
         if lat else 0, "cli_cpu": sum(o["cpu"] for o in out), "errors": errs, "samples": samples,
         "settle_s": settle_s}
    if meter:
        d = CpuMeter.delta(s0, s1)
        r["srv_cpu"] = sum(d.values())
        r["per_proc"] = d
    return r


def bench_target(target: Target, workers: Workers, a, sizes: dict) -> list[dict]:
    tgt = target.tgt
    P = len(workers.procs)
    meter = CpuMeter(target.pids) if target.pids else None
    results: list[dict] = []
    for b in ("bench-obj", "bench-list", "bench-zero", "bench-big") + (("bench-sse",) if a.sse else ()):
        workers.run([{"kind": "bucket", "tgt": tgt, "bucket": b}])
    idle_ticks, idle_rate = 1.0, 0.0
    if meter:
        time.sleep(1.0)
        s0 = meter.snap()
        time.sleep(3.0)
        idle = sum(CpuMeter.delta(s0, meter.snap()).values())
        idle_rate = idle / 3.0
        idle_ticks = max(1.0, 2.0 * idle_rate * 0.5 * CLK_TCK)  # "quiet" threshold per 0.5 s settle interval

    prof_phases = {p.strip() for p in (a.profile_phases or "").split(",") if p.strip()}
    wanted = {p.strip() for p in a.phases.split(",") if p.strip()} if a.phases else None
    while wanted is not None and not {PHASE_NEEDS[p] for p in wanted if p in PHASE_NEEDS} <= wanted:
        wanted |= {PHASE_NEEDS[p] for p in wanted if p in PHASE_NEEDS}

    def phase(name, tasks, settle=False, ops_unit=1):
        if wanted is not None and name not in wanted:
            return None
        profile = (a.profile_dir, a.profile_native, a.profile_perf) if a.profile_dir and name in prof_phases and target.pids \
            else None
        r = run_phase(name, target, workers, tasks, meter, settle, idle_ticks, ops_unit, profile)
        r["idle_ms_s"] = idle_rate * 1e3
        results.append(r)
        print_row(target.name, r, flush=True)
        if r["errors"]:
            print(f"#   {r['errors']} errors, e.g. {r['samples'][:2]}", flush=True)
        if settle and r["settle_s"] >= SETTLE_MAX_S:
            print(f"#   {name}: the servers' CPU did not go quiet within {SETTLE_MAX_S:.0f} s; accounting stopped there",
                  flush=True)
        if settle and hasattr(target, "dn_blocks"):
            print(f"#   after {name}: the DataNodes hold {target.dn_blocks()} blocks in all (replicas included)",
                  flush=True)
        return r

    conc = max(1, a.concurrency // P)
    n, size = sizes["objects"], a.object_kib * KiB  # 128 KiB unless --object-kib (the phases keep their names)
    idx = list(range(n))
    phase("PUT 128K", [{"kind": "put", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-obj", "size": size}
                       for s in split(idx, P)], settle=True)
    if a.sse:
        phase("PUT 128K SSE", [{"kind": "put", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-sse",
                                "size": size, "sse": True} for s in split(idx, P)], settle=True)
    rnd = random.Random(42)
    shuffled = idx[:]
    rnd.shuffle(shuffled)
    phase("GET 128K", [{"kind": "get", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-obj", "size": size}
                       for s in split(shuffled, P)])
    if a.sse:
        phase("GET 128K SSE", [{"kind": "get", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-sse",
                                "size": size} for s in split(shuffled, P)])
    rnd.shuffle(shuffled)
    phase("HEAD", [{"kind": "head", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-obj", "size": size}
                   for s in split(shuffled, P)])
    k = sizes["keys"]
    phase("PUT tiny", [{"kind": "put_tiny", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-list"}
                       for s in split(list(range(k)), P)], settle=True)
    phase("PUT 0", [{"kind": "put_zero", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-zero"}
                    for s in split(list(range(k)), P)], settle=True)
    reps = sizes["list_reps"]
    per = [reps // P + (1 if i < reps % P else 0) for i in range(P)]
    phase("LIST/1000", [{"kind": "list", "tgt": tgt, "bucket": "bench-list", "want": k, "reps": r}
                        for r in per if r], ops_unit=1)
    total = sizes["big"]
    phase("MPU PUT", [{"kind": "mpu", "tgt": tgt, "bucket": "bench-big", "key": "big", "total": total,
                       "part": a.part_mib * MiB, "conc": a.mpu_parallel}], settle=True)
    phase("GET stream", [{"kind": "stream", "tgt": tgt, "bucket": "bench-big", "key": "big", "total": total}])
    phase("GET stream warm", [{"kind": "stream", "tgt": tgt, "bucket": "bench-big", "key": "big", "total": total}])
    m, rn = sizes["ranges"], MiB
    offs = [(j, rnd.randrange(0, total - rn)) for j in range(m)]
    phase("RANGE 1M", [{"kind": "range", "tgt": tgt, "conc": conc, "items": s, "bucket": "bench-big", "key": "big",
                        "total": total, "n": rn} for s in split(offs, P)])
    if meter:
        time.sleep(2.0)
        s0 = meter.snap()
        time.sleep(3.0)
        d = CpuMeter.delta(s0, meter.snap())
        print(f"# {target.name}: idle server CPU before the phases {idle_rate * 1e3:.1f} ms/s, after them "
              f"{sum(d.values()) / 3.0 * 1e3:.1f} ms/s (" + ", ".join(f"{n} {v / 3.0 * 1e3:.0f}" for n, v in d.items())
              + ")", flush=True)
    return results


# ------------------------------------------------------------------------------------------------------- reporting
HDR = (f"{'target':<8} {'phase':<15} {'ops':>6} {'wall s':>7} {'ops/s':>8} {'MB/s':>7} {'p50':>6} {'p99':>7} "
       f"{'srv ms/op':>9} {'gw':>6} {'nn':>6} {'dn':>6} {'srv ms/MiB':>10} {'cli ms/op':>9} {'settle':>6}")


def print_row(tname: str, r: dict, flush=False) -> None:
    ops = max(r["ops"], 1)
    pp = r.get("per_proc") or {}

    def grp(prefix):
        v = sum(x for n, x in pp.items() if n.startswith(prefix))
        return f"{v / ops * 1e3:6.2f}" if any(n.startswith(prefix) for n in pp) else f"{'':>6}"

    srv = f"{r['srv_cpu'] / ops * 1e3:9.2f}" if "srv_cpu" in r else f"{'n/a':>9}"
    mib = r["bytes"] / MiB
    per_mib = f"{r['srv_cpu'] * 1e3 / mib:10.2f}" if "srv_cpu" in r and mib >= 1 else f"{'':>10}"
    print(f"{tname:<8} {r['phase']:<15} {r['ops']:>6} {r['wall']:7.2f} {r['ops_s']:8.1f} {r['mb_s']:7.1f} "
          f"{r['p50']:6.1f} {r['p99']:7.1f} {srv} {grp('gateway')} {grp('namenode')} {grp('datanode')} {per_mib} "
          f"{r['cli_cpu'] / ops * 1e3:9.3f} {r['settle_s']:5.1f}s", flush=flush)


def comparison(res: dict[str, list[dict]]) -> None:
    e = {r["phase"]: r for r in res.get("epochfs", [])}
    m = {r["phase"]: r for r in res.get("moto", [])}
    print("\n== epochfs vs moto (ratio = epochfs / moto; CPU: lower is better, ops/s and MB/s: higher is better)")
    print(f"{'phase':<15} {'ef ms/op':>9} {'moto ms/op':>10} {'cpu ratio':>9} {'ef ops/s':>9} {'moto ops/s':>10} "
          f"{'ratio':>6} {'ef MB/s':>8} {'moto MB/s':>9} {'ratio':>6}  {'target (epochfs)':<22} verdict")
    order = [r["phase"] for r in res.get("epochfs", []) or res.get("moto", [])]
    for ph in order:
        er, mr = e.get(ph), m.get(ph)

        def cpu(r):
            return r["srv_cpu"] / max(r["ops"], 1) * 1e3 if r and "srv_cpu" in r else None

        def fmt(v, w, p=2):
            return f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}}"

        def ratio(x, y):
            return x / y if x is not None and y else None

        ec, mc = cpu(er), cpu(mr)
        eo, mo = (er or {}).get("ops_s"), (mr or {}).get("ops_s")
        eb, mb = (er or {}).get("mb_s"), (mr or {}).get("mb_s")
        tgt_s, verdict = "", ""
        if ph in TARGETS and er:
            kind, val = TARGETS[ph]
            if kind == "cpu":
                tgt_s = f"srv CPU <= {val:g} ms/op"
                verdict = "-" if ec is None else ("PASS" if ec <= val else "FAIL")
            else:
                tgt_s = f">= {val:g} MB/s"
                verdict = "PASS" if eb >= val else "FAIL"
        print(f"{ph:<15} {fmt(ec, 9)} {fmt(mc, 10)} {fmt(ratio(ec, mc), 9)} {fmt(eo, 9, 1)} {fmt(mo, 10, 1)} "
              f"{fmt(ratio(eo, mo), 6)} {fmt(eb, 8, 1)} {fmt(mb, 9, 1)} {fmt(ratio(eb, mb), 6)}  {tgt_s:<22} {verdict}")


def ha_pairs(res: dict[str, list[dict]]) -> list[tuple[str, dict, dict]]:
    """(phase, embedded row, HA row) of each phase both targets ran."""
    e = {r["phase"]: r for r in res.get("epochfs", [])}
    return [(h["phase"], e[h["phase"]], h) for h in res.get("epochfs-ha", []) if h["phase"] in e]


def _ms_per_op(r: dict, names=None) -> float:
    if "srv_cpu" not in r:
        return float("nan")
    cpu = r["srv_cpu"] if names is None else sum(r["per_proc"].get(n, 0.0) for n in names)
    return cpu / max(r["ops"], 1) * 1e3


def ha_ratio(res: dict[str, list[dict]]) -> None:
    """--target ha: throughput and server CPU per op of the HA cluster against the embedded one, per phase, and
    where the HA cluster's CPU went: etcd, the active NameNode (the busiest), the standbys, the gateway."""
    print("\n== epochfs up --ha vs epochfs up (HA / embedded)")
    print(f"{'phase':<11} {'emb ops/s':>9} {'ha ops/s':>9} {'ratio':>6} {'emb ms/op':>9} {'ha ms/op':>9}")
    for ph, b, h in ha_pairs(res):
        print(f"{ph:<11} {b['ops_s']:9.1f} {h['ops_s']:9.1f} {h['ops_s'] / b['ops_s']:6.2f} {_ms_per_op(b):9.2f} "
              f"{_ms_per_op(h):9.2f}")
    for ph, b, h in ha_pairs(res):
        pp = h.get("per_proc") or {}
        nns = sorted((n for n in pp if n.startswith("namenode")), key=pp.get, reverse=True)
        if not nns:
            continue
        print(f"# {ph}, CPU ms per op: HA etcd {_ms_per_op(h, [n for n in pp if n.startswith('etcd')]):.3f}, "
              f"active NameNode {_ms_per_op(h, nns[:1]):.3f}, standbys {_ms_per_op(h, nns[1:]):.3f}, gateway "
              f"{_ms_per_op(h, [n for n in pp if n.startswith('gateway')]):.3f}; embedded NameNode "
              f"{_ms_per_op(b, [n for n in b.get('per_proc', {}) if n.startswith('namenode')]):.3f}, gateway "
              f"{_ms_per_op(b, [n for n in b.get('per_proc', {}) if n.startswith('gateway')]):.3f}")


def ha_summary(rounds: list[dict[str, list[dict]]]) -> None:
    """--rounds: each round's HA / embedded ratios, and their medians (the pairs alternate which runs first, so a
    drift of the machine's speed over the run falls on both)."""
    by: dict[str, list[tuple[float, float]]] = {}
    for res in rounds:
        for ph, b, h in ha_pairs(res):
            by.setdefault(ph, []).append((h["ops_s"] / b["ops_s"], _ms_per_op(b) / _ms_per_op(h)))
    print(f"\n== {len(rounds)} rounds, HA / embedded: throughput ratio, and CPU per op embedded / HA")
    for ph, rs in by.items():
        print(f"{ph:<11} ops/s ratios {', '.join(f'{r:.2f}' for r, _ in rs)}: median "
              f"{statistics.median(r for r, _ in rs):.2f}; CPU ratios {', '.join(f'{c:.2f}' for _, c in rs)}: "
              f"median {statistics.median(c for _, c in rs):.2f}")


def sse_ratio(res: dict[str, list[dict]]) -> None:
    """--sse: server CPU per op with SSE-S3 against without, per target (the goal: at most 1.3x)."""
    for tname, rows in res.items():
        by = {r["phase"]: r for r in rows}
        for ph in ("PUT 128K", "GET 128K"):
            off, on = by.get(ph), by.get(ph + " SSE")
            if off and on and "srv_cpu" in off and "srv_cpu" in on:
                a, b = off["srv_cpu"] / max(off["ops"], 1) * 1e3, on["srv_cpu"] / max(on["ops"], 1) * 1e3
                print(f"# {tname} {ph}: SSE-S3 {b:.2f} ms/op against {a:.2f} without: {b / a:.2f}x "
                      f"({'PASS' if b / a <= 1.3 else 'FAIL'}, goal <= 1.3x)", flush=True)


def code_version() -> str:
    """The epochfs checkout's commit (read-only git commands), '+dirty' with uncommitted changes."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev or "?") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def main() -> None:
    global PAYLOAD, PART
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=("epochfs", "moto", "both", "ha"), default="both",
                    help="ha: `epochfs up` against `epochfs up --ha` (3 etcd members, 3 NameNodes; server CPU summed "
                         "over all of them), with the ratio HA / embedded")
    ap.add_argument("--quick", action="store_true", help="300 objects, 2,000 keys, 64 MiB big object, 100 ranges")
    ap.add_argument("--objects", type=int, help="128 KiB objects (default 2000; quick 300)")
    ap.add_argument("--rounds", type=int, default=1, help="--target ha: run the pair this many times, alternating "
                    "which goes first, and print the median ratios")
    ap.add_argument("--keys", type=int, help="tiny objects listed (default 10000; quick 2000)")
    ap.add_argument("--list-reps", type=int, help="full listings (default 4; quick 2)")
    ap.add_argument("--big-mib", type=int, help="multipart object size in MiB (default 512; quick 64)")
    ap.add_argument("--ranges", type=int, help="1 MiB ranged GETs (default 300; quick 100)")
    ap.add_argument("--part-mib", type=int, default=16)
    ap.add_argument("--object-kib", type=int, default=128,
                    help="object size of the PUT 128K / GET 128K phases (e.g. 110 or 4096; the names stay)")
    ap.add_argument("--mpu-parallel", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--sse", action="store_true", help="also PUT and GET 128K with SSE-S3, and print the CPU ratio")
    ap.add_argument("--procs", type=int, default=2, help="client worker processes (concurrency is split over them)")
    ap.add_argument("--endpoint", help="benchmark an already running S3 endpoint instead (no servers started)")
    ap.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID", ""))
    ap.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY", ""))
    ap.add_argument("--pids", help="comma-separated server pids for CPU accounting with --endpoint")
    ap.add_argument("--keep", action="store_true", help="keep the epochfs data directory")
    ap.add_argument("--hold", type=float, default=0.0,
                    help="after the run, keep the servers up this many seconds (for profiling)")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--phases", help="comma-separated phase names to run (and the phases they read from), e.g. "
                    "'MPU PUT,RANGE 1M'; default all")
    ap.add_argument("--profile-report", metavar="DIR", help="only summarize the py-spy files in DIR and exit")
    ap.add_argument("--profile-dir", help="run py-spy record on every server process during --profile-phases and "
                    "write raw stacks here (perturbs the CPU numbers of those phases)")
    ap.add_argument("--profile-phases", default="PUT 128K,GET 128K", help="comma-separated phase names")
    ap.add_argument("--profile-native", action="store_true", help="py-spy --native (pauses the target to sample)")
    ap.add_argument("--profile-perf", action="store_true", help="use `perf record -g` instead of py-spy")
    a = ap.parse_args()
    if a.profile_report:
        profile_summary(a.profile_report)
        return
    q = a.quick
    sizes = {"objects": a.objects or (300 if q else 2000), "keys": a.keys or (2000 if q else 10000),
             "list_reps": a.list_reps or (2 if q else 4), "big": (a.big_mib or (64 if q else 512)) * MiB,
             "ranges": a.ranges or (100 if q else 300)}
    PAYLOAD = os.urandom(max(256, 2 * a.object_kib) * KiB)
    PART = os.urandom(a.part_mib * MiB)
    workers = Workers(a.procs)
    print(f"# s3_bench: {sizes}, concurrency {a.concurrency} over {a.procs} client processes, parts "
          f"{a.part_mib} MiB x {a.mpu_parallel} in flight, {os.cpu_count()} CPUs, CLK_TCK {CLK_TCK}, epochfs "
          f"{code_version()}, "
          f"{_dt.datetime.now().isoformat(timespec='seconds')}")
    names = {"both": ["epochfs", "moto"], "ha": ["epochfs", "epochfs-ha"]}.get(a.target, [a.target])
    if a.endpoint:
        names = ["external"]
    rounds: list[dict[str, list[dict]]] = []
    try:
        for rnd in range(max(1, a.rounds) if a.target == "ha" else 1):
            results: dict[str, list[dict]] = {}
            for name in (names if rnd % 2 == 0 else names[::-1]):
                t = (ExternalTarget(a.endpoint, a.access_key, a.secret_key, a.pids) if name == "external"
                     else EpochfsTarget(a.keep, ha=name == "epochfs-ha") if name.startswith("epochfs")
                     else MotoTarget())
                try:
                    print(f"# {name}: {t.note}")
                    print(HDR, flush=True)
                    results[name] = bench_target(t, workers, a, sizes)
                    if a.hold:
                        print(f"# holding {name} up for {a.hold:.0f} s: {t.note}", flush=True)
                        time.sleep(a.hold)
                finally:
                    t.stop()
            rounds.append(results)
            if "epochfs-ha" in results:
                ha_ratio(results)
    finally:
        workers.close()
    if len(rounds) > 1:
        ha_summary(rounds)
    if "epochfs-ha" not in results and (len(results) > 1 or "epochfs" in results):
        comparison(results)
    if a.sse:
        sse_ratio(results)
    if a.profile_dir and os.path.isdir(a.profile_dir):
        profile_summary(a.profile_dir)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"sizes": sizes, "results": results, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
