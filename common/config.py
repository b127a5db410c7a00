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
    log_level: str = "info"
    keep_alive_s: float = 65.0
    """How long an idle HTTP connection stays open. Longer than the clients' own pool expiry (httpx 5 s, aiohttp
    15 s, botocore 60 s idle reuse): with uvicorn's 5 s default, a client reusing a connection just as the server
    closes it gets a ReadError on a request it already sent. A new connection that sends nothing is closed after it
    too."""
    header_timeout_s: float = 30.0
    """Time a client has to send a whole request head once it began (as Apache's RequestReadTimeout header=20-40,
    nginx's client_header_timeout 60 s); a slower one is disconnected."""
    body_idle_timeout_s: float = 60.0
    """Longest pause in a request body the client sends (nginx's client_body_timeout); then S3's 400 RequestTimeout
    and the connection is closed. Time the service itself stops reading (backpressure) does not count."""
    max_header_bytes: int = 16384
    """Largest request head (request line and headers): S3 allows 8 KiB of headers, this leaves room for a long
    URL (a 1,024-byte key percent-encoded, presigned query parameters). Larger: 400 RequestHeaderSectionTooLarge."""
    max_header_count: int = 100
    """Most header fields a request may carry (Apache's LimitRequestFields)."""


def parse_addr(addr: str, default_port: int = 0) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host:
        return addr, default_port
    return host.strip("[]"), int(port)
