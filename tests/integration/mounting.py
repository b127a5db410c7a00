"""`epochfs mount` as the tests run it: a real FUSE mount in a child process, always unmounted afterwards."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cluster import MAIN

FUSERMOUNT = shutil.which("fusermount3")
needs_fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse") or FUSERMOUNT is None or os.geteuid() != 0,
                                reason="needs /dev/fuse, fusermount3 (apt: fuse3) and root for allow_other")


class Mount:
    def __init__(self, cluster, source: str, mountpoint: Path, *extra: str, log: Path) -> None:
        self.path = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochfs.frontends.cli.main", "mount", "-f", source, str(mountpoint),
             "--endpoint", cluster.endpoint, "--access-key", MAIN[0], "--secret-key", MAIN[1], *extra],
            stdout=self._log, stderr=self._log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.ismount(mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"mount failed: {log.read_text()[-3000:]}")
            time.sleep(0.05)

    def close(self) -> None:
        """SIGTERM (a clean unmount); a lazy unmount if anything is left behind."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if os.path.ismount(self.path):
            subprocess.call([FUSERMOUNT, "-u", "-z", str(self.path)])
        self._log.close()


def fs_requests(cluster) -> dict[str, float]:
    """The gateway's count of mount API requests per operation (from /metrics)."""
    out = {}
    for line in httpx.get(f"{cluster.endpoint}/metrics").text.splitlines():
        if line.startswith("epochfs_fs_requests_total{"):
            op = line.split('op="', 1)[1].split('"', 1)[0]
            out[op] = float(line.rsplit(" ", 1)[1])
    return out
