"""The end of a streamed file, kept in memory until its upload takes it (frontends/fuse/writer.py's streams).

A file streamed while it is written (dd, cp, torch.save into the mount) has its local copy written once and read
back once by its upload. Through the page cache that cost the mount most of its CPU (perf under `dd bs=4M`: the
pwrite's copy into fresh page-cache pages 26% of its samples, the upload's pread 6%), and the kernel wrote those
pages back besides. A front instead collects the writes in slabs: page-aligned mappings of SLAB bytes, reused so
their pages are never fresh ones. A full slab is written to the local copy past the page cache (O_DIRECT: the
device reads it from the slab) and handed to the upload as it is, so the bytes are copied once in the mount (the
write into the slab). Measured before choosing (`/tmp` script, 1 GiB in 1 MiB writes, 4 MiB pieces read back, 6
rounds each, the process's CPU): page cache with fadvise 0.55-1.16, median ~0.8 ms/MiB; O_DIRECT from a reused
slab 0.12-0.45, median ~0.17 (~0.39 when the piece is copied out once more).

The local copy stays whole below `at` (the slab being filled starts there), so everything that reads it (a re-upload
after a failed stream, a truncate, a read) works as before once the front is ended (`Front.end`: the slab being
filled written as usual). A front holds at most MAX_SLABS slabs (the filling one, the sealed ones its upload has not
taken, those it is sending): past that a write waits for the upload, which bounds the mount's memory per stream.
"""
from __future__ import annotations

import collections
import mmap
import os

SLAB = 4 << 20  # a multiple of every O_DIRECT alignment (the page size), and the mount's upload piece
# the filling slab, one sealed and 8 being sent (a stream's 2 rounds in flight of 4 blocks each:
# common/directwrite.py ROUNDS_IN_FLIGHT x WINDOW)
MAX_SLABS = 10
IDLE_SLABS = MAX_SLABS  # slabs the mount keeps mapped between streams


class Slabs:
    """The mount's slabs not in use, reused (a fresh mapping's pages fault in at first touch, as the page cache's
    did)."""

    def __init__(self, keep: int = IDLE_SLABS) -> None:
        self.idle: list[mmap.mmap] = []
        self.keep = keep

    def get(self) -> mmap.mmap:
        return self.idle.pop() if self.idle else mmap.mmap(-1, SLAB)

    def put(self, slab: mmap.mmap) -> None:
        if len(self.idle) < self.keep:
            self.idle.append(slab)
            return
        try:
            slab.close()
        except BufferError:  # a view of it is still alive somewhere: unmapped with it
            pass


def open_direct(fd: int) -> int | None:
    """The local copy `fd` opened again for writes past the page cache, or None where its file system doesn't take
    O_DIRECT."""
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return None


class Front:
    """The bytes [at, at + n) of a file (its end) in the slab being filled; the sealed slabs in `held` (offset,
    slab), already in the local copy, wait for the upload to take them; `out` slabs were given to it as they are.
    The caller serializes calls (the writer's lock, or trio's single thread)."""

    def __init__(self, fd: int, dfd: int, size: int, slabs: Slabs) -> None:
        self.fd, self.dfd, self.slabs = fd, dfd, slabs
        self.at = size - size % SLAB
        self.slab: mmap.mmap | None = slabs.get()
        self.n = size - self.at
        if self.n:  # the start of the slab was written to the local copy before the front began
            self._view()[:self.n] = os.pread(fd, self.n, self.at)
        self.held: collections.deque[tuple[int, mmap.mmap]] = collections.deque()
        self.out = 0

    def _view(self, slab: mmap.mmap | None = None) -> memoryview:
        return memoryview(self.slab if slab is None else slab)

    def takes(self, off: int) -> bool:
        """Whether a write at `off` goes into the front (it starts in the slab being filled, without a hole)."""
        return self.at <= off <= self.at + self.n

    def put(self, off: int, data: memoryview) -> int:
        """Copy the start of `data` (written at `off`, which `takes`) into the slab being filled; the bytes taken.
        The slab is full when `full()`: `seal` it before the next put."""
        pos = off - self.at
        k = min(SLAB - pos, len(data))
        self._view()[pos:pos + k] = data[:k]
        self.n = max(self.n, pos + k)
        return k

    def full(self) -> bool:
        return self.n == SLAB

    def room(self) -> bool:
        """Whether a slab may be taken (`next`) after `seal`."""
        return self.out + len(self.held) < MAX_SLABS

    def write_slab(self) -> None:
        """Write the full slab to the local copy past the page cache (blocking: the caller runs it in a thread)."""
        if os.pwrite(self.dfd, self._view(), self.at) != SLAB:  # (a short O_DIRECT write can't be resumed)
            raise OSError("short write to the local copy")

    def seal(self) -> None:
        """After write_slab: the slab waits for the upload; the next one starts after it once there is room
        (`next`)."""
        self.held.append((self.at, self.slab))
        self.at += SLAB
        self.slab, self.n = None, 0

    def next(self) -> None:
        self.slab = self.slabs.get()

    def read(self, off: int, n: int, own: bool = False) -> tuple[bytes | memoryview, mmap.mmap | None]:
        """Bytes [off, off + n) of the file, up to its end: from the slabs where they hold them, else from the local
        copy. `own` (the upload): a sealed slab read whole is handed over as it is (returned second; give it back
        with `give`), and every sealed slab read up to its end is no longer held."""
        if own and self.held and self.held[0][0] == off and n == SLAB:
            _, slab = self.held.popleft()
            self.out += 1
            return memoryview(slab), slab
        parts, pos, end = [], off, off + n
        for start, slab in list(self.held):
            if pos >= end:
                break
            if start + SLAB <= pos:
                continue
            if start > pos:
                parts.append(os.pread(self.fd, min(start, end) - pos, pos))
                pos = min(start, end)
                if pos >= end:
                    break
            k = min(start + SLAB, end) - pos
            parts.append(self._view(slab)[pos - start:pos - start + k].tobytes())
            pos += k
        if own:
            while self.held and self.held[0][0] + SLAB <= end:
                self.slabs.put(self.held.popleft()[1])
        if pos < min(end, self.at):
            parts.append(os.pread(self.fd, min(end, self.at) - pos, pos))
            pos = min(end, self.at)
        if pos < end:
            parts.append(self._view()[pos - self.at:min(end - self.at, self.n)].tobytes())
        return (parts[0] if len(parts) == 1 else b"".join(parts)), None

    def give(self, slab: mmap.mmap) -> None:
        """The upload is done with a slab `read` handed over."""
        self.out -= 1
        self.slabs.put(slab)

    def end(self, keep: bool = True) -> None:
        """Stop: the slab being filled goes to the local copy as usual (`keep`; else the copy is being dropped),
        the slabs go back (those handed over come back through `give`, as they're done)."""
        if keep and self.n:
            os.pwrite(self.fd, self._view()[:self.n], self.at)
        if self.slab is not None:
            self.slabs.put(self.slab)
            self.slab = None
        for _, slab in self.held:
            self.slabs.put(slab)
        self.held.clear()
        self.n = 0
        os.close(self.dfd)
