"""Background workers: a worker implements one pass (`run_once`); `run_forever` adds the pause, backoff and cancellation."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
import sniffio


async def in_thread(fn, *args):
    """fn(*args) in a worker thread, from asyncio or trio (the mount: anyio's to_thread wants a newer trio than
    its 0.22)."""
    if sniffio.current_async_library() == "trio":
        import trio
        return await trio.to_thread.run_sync(fn, *args)
    return await anyio.to_thread.run_sync(fn, *args)


@dataclass
class PassStats:
    ok: int = 0
    failed: int = 0
    extra: dict = field(default_factory=dict)


class Worker:
    interval_s: float = 1.0
    max_backoff_s: float = 30.0

    async def run_once(self) -> PassStats:
        raise NotImplementedError

    async def run_forever(self) -> None:
        log = logging.getLogger(f"epochfs.{type(self).__name__}")
        backoff = self.interval_s
        while True:
            try:
                stats = await self.run_once()
                backoff = self.interval_s
                # a pass that did work goes again at once; an idle or failing one waits
                if stats.ok and not stats.failed:
                    await anyio.sleep(0)
                    continue
            except Exception:
                log.exception("pass failed")
                backoff = min(backoff * 2, self.max_backoff_s)
            await anyio.sleep(backoff)
