"""Running a service: uvicorn on uvloop + httptools (with bounds on request heads and time, common/bounded_http.py),
logs configured once, clean exit on SIGTERM/SIGINT, and an exit to be started again when the service asks."""
from __future__ import annotations

import ctypes
import logging
import sys
from typing import Callable

import uvicorn
from uvicorn.main import STARTUP_FAILURE

from .bounded_http import protocol_for
from .config import ServiceSettings, require_safe_cluster_secret
from .logfmt import LogfmtFormatter


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(LogfmtFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])


# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_buffers_on_heap(trim_bytes: int = 256 << 20) -> None:
    """Serve allocations up to 32 MiB from the heap and give heap memory back to the OS only above `trim_bytes` free
    (the services: 256 MiB; the mount, on a user's machine, 64).

    glibc's defaults start at 128 KiB for both and only rise as large buffers get freed, so how much a read costs
    depended on what the process had done before: until some 4 MiB block had passed through, every 256 KiB chunk a
    DataNode read and every 1 MiB payload the gateway received came from a fresh mmap (or a heap grown again after
    a trim) and was page-faulted in anew. bench/s3_bench.py RANGE 1M on a freshly started cluster: 330,000 minor
    faults per DataNode for 4,000 ranges and 3.8-4.1 ms of server CPU per 1 MiB ranged GET; with this, 14,000 and
    2.4-2.5 ms. The trim threshold was 64 MiB: a DataNode under writes holds 100-230 MiB of payloads at its peak
    (4 DCP writer threads, each with two rounds of 4 blocks in flight, and their replicas), gave it back between
    bursts and faulted it in again, 150-300 page faults per MiB stored (perf: clear_page_erms under the payload's
    read 8% of the DataNodes' samples, the fault path 4% more); at 256 MiB: 0-15 per MiB and 2.70-2.93 against
    3.27-4.39 ms of DataNode CPU per MiB (DCP saves of 256 MiB, a fresh cluster of each alternating, a /tmp
    script). The price: a DataNode keeps what its busiest moment needed resident (~210 MiB against ~100-190 after
    those saves). No-op where the C library has no mallopt (not glibc)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, 32 << 20)
        mallopt(M_TRIM_THRESHOLD, trim_bytes)


# the exit status of a service that stopped itself to be started again (EX_TEMPFAIL): `epochfs up`, systemd
# (Restart=on-failure), Kubernetes and compose start it again
EXIT_RESTART = 75


def serve(create_app: Callable, settings: ServiceSettings) -> None:
    """Run the service until SIGTERM/SIGINT, or until it calls `app.state.restart(why)`: then it shuts down as
    for SIGTERM (requests in flight finish, the lifespan's cleanup runs) and exits with EXIT_RESTART."""
    setup_logging(settings.log_level)
    require_safe_cluster_secret(settings)
    keep_buffers_on_heap()
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(
        app, host=settings.host, port=settings.port, loop="uvloop", http=protocol_for(settings), log_level="warning",
        access_log=False, timeout_graceful_shutdown=5, lifespan="on", timeout_keep_alive=settings.keep_alive_s))
    wanted: list[str] = []

    def restart(why: str) -> None:
        if not wanted:
            logging.getLogger("epochfs").warning("stopping to be started again: %s", why)
        wanted.append(why)
        server.should_exit = True

    app.state.restart = restart
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:  # it never served (its port taken, its lifespan failed): as uvicorn.run exits
        sys.exit(STARTUP_FAILURE)
    if wanted:
        sys.exit(EXIT_RESTART)
