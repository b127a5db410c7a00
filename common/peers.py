"""A cache of DataNode clients keyed by "host:port", shared by everything in one process that talks to DataNodes."""
from __future__ import annotations

from .clients import DataNodeClient
from .config import parse_addr
from .rpc import RpcClient


class Peers:
    def __init__(self, secret: str, *, timeout: float = 30.0) -> None:
        self.secret = secret
        self.timeout = timeout
        self._clients: dict[str, DataNodeClient] = {}

    def get(self, addr: str) -> DataNodeClient:
        """The typed client of the DataNode at `addr` (one connection pool per address)."""
        c = self._clients.get(addr)
        if c is None:
            host, port = parse_addr(addr)
            c = self._clients[addr] = DataNodeClient(RpcClient(host, port, self.secret, timeout=self.timeout))
        return c

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
