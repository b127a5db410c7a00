"""A cache of DataNode clients keyed by "host:port", shared by everything in one process that talks to DataNodes."""
from __future__ import annotations

import logging
import time

from . import localread
from .clients import DataNodeClient
from .config import parse_addr
from .failover import AVOID_S, avoided
from .rpc import RpcClient

log = logging.getLogger("epochfs.peers")


class Peers:
    def __init__(self, secret: str, *, timeout: float = 30.0, local_reads: bool = False) -> None:
        """`local_reads`: read from DataNodes on this machine through their local sockets (common/localread.py)."""
        self.secret = secret
        self.timeout = timeout
        self.local_proof = localread.proof(secret) if local_reads and localread.enabled() else ""
        self._clients: dict[str, DataNodeClient] = {}
        self._slow: dict[str, float] = {}  # address -> monotonic time until which reads ask other holders first

    def slow(self, addr: str) -> None:
        """Note that the DataNode at `addr` did not answer a read in time (or could not be reached): reads ask other
        holders first for AVOID_S (common/failover.py)."""
        if addr not in self.avoided():
            log.warning("DataNode %s did not answer a read in time: other holders are read first for %.0f s", addr,
                        AVOID_S)
        self._slow[addr] = time.monotonic() + AVOID_S

    def avoided(self) -> set[str]:
        return avoided(self._slow) if self._slow else set()

    def get(self, addr: str) -> DataNodeClient:
        """The typed client of the DataNode at `addr` (one connection pool per address)."""
        c = self._clients.get(addr)
        if c is None:
            host, port = parse_addr(addr)
            local = localread.LocalReader(addr, proof=self.local_proof) if self.local_proof else None
            c = self._clients[addr] = DataNodeClient(RpcClient(host, port, self.secret, timeout=self.timeout), local)
        return c

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
