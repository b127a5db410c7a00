"""common/service.py keep_buffers_on_heap: payload-sized buffers freed after a burst stay mapped, so the next burst
is not page-faulted in again (what it saves: the DataNodes' CPU per MiB stored, see its docstring)."""
from __future__ import annotations

import subprocess
import sys

import pytest

BURST = """
import resource, sys
from epochfs.common.service import keep_buffers_on_heap
keep_buffers_on_heap(int(sys.argv[1]) << 20)
def burst():
    bufs = [bytearray(4 << 20) for _ in range(40)]   # 160 MiB of 4 MiB payloads in flight, then all freed
    del bufs
burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
burst()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(trim_mib: int) -> int:
    out = subprocess.run([sys.executable, "-c", BURST, str(trim_mib)], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and minor-fault counts")
def test_a_second_burst_of_payloads_reuses_the_memory_of_the_first():
    pages = (160 << 20) // 4096
    assert _faults(256) < pages // 20, "freed payloads stayed mapped: the second burst faults (almost) nothing in"
    assert _faults(64) > pages // 2, "above a 64 MiB trim threshold they were given back and faulted in again"
