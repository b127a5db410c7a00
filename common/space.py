"""The space a set of DataNodes offers, each disk counted once."""
from __future__ import annotations

from pathlib import Path


def disk_id(folder) -> str:
    """What names the file system holding `folder` among those of every DataNode: this kernel's boot id (one per
    running machine: containers and network namespaces on it share it) and the file system's device number. Two
    DataNodes with the same id take their free space from the same disk."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        import socket
        boot = socket.gethostname()
    return f"{boot}:{Path(folder).stat().st_dev}"


def pooled(nodes) -> tuple[int, int]:
    """(capacity, used) of `nodes` (each with .capacity, .used and .disk). A DataNode without a configured capacity
    offers its disk's free space (datanode/heartbeat.py, `disk` set): several on one disk (`epochfs up` runs three)
    share that space, so it counts once, not once per node, and the capacity is it plus what they all use."""
    used = sum(n.used for n in nodes)
    shared: dict[str, int] = {}
    free = 0
    for n in nodes:
        left = max(n.capacity - n.used, 0)
        if n.disk:
            shared[n.disk] = max(shared.get(n.disk, 0), left)
        else:
            free += left
    return used + free + sum(shared.values()), used
