"""Settings shared by every service (pydantic-settings; each service adds its own env prefix)."""
from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_SECRET = "epochfs-dev-cluster-secret"


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    host: str = "127.0.0.1"
    """Address the service's HTTP port (/healthz, /metrics, APIs) binds to."""
    port: int = 0
    """HTTP port."""
    rpc_port: int = 0
    """Internal RPC port (NameNode, DataNode)."""
    data_dir: Path = Path("./epochfs-data")
    cluster_secret: str = DEFAULT_SECRET
    """Shared secret every internal RPC connection must present."""
    rpc_max_payload: int = 64 << 20
    """Largest request payload the internal RPC server accepts from a peer holding the cluster secret (a block is
    the largest: keep it above the largest block size plus margin). Before its hello a connection may send a few KiB
    only (common/rpc.py)."""
    log_level: str = "info"
    keep_alive_s: float = 65.0
    """How long an idle HTTP connection stays open. Longer than the clients' own pool expiry (httpx 5 s, aiohttp
    15 s, botocore 60 s idle reuse): with uvicorn's 5 s default, a client reusing a connection just as the server
    closes it gets a ReadError on a request it already sent."""


def parse_addr(addr: str, default_port: int = 0) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host:
        return addr, default_port
    return host.strip("[]"), int(port)
