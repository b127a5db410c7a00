"""Settings shared by every service (pydantic-settings; each service adds its own env prefix)."""
from __future__ import annotations

import ipaddress
import logging
import socket
from pathlib import Path
from typing import ClassVar

from pydantic_settings import BaseSettings, SettingsConfigDict

from . import defaults

DEFAULT_SECRET = "epochfs-dev-cluster-secret"
"""Public (it is in this file): a service accepting RPC with it is safe only where nobody else can connect."""


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
    """Shared secret every internal RPC connection must present. The default is public: a NameNode or DataNode
    refuses to start with it (or an empty one) unless `host` is a loopback address, and warns there."""
    metrics_token: str = ""
    """When set, /metrics answers only `Authorization: Bearer <token>` (or HTTP Basic with the token as password,
    any user name); unset, it is open to whoever reaches the HTTP port."""
    rpc_max_payload: int = defaults.RPC_MAX_PAYLOAD
    """Largest request payload the internal RPC server accepts from a peer holding the cluster secret (a block is
    the largest: keep it above the largest block size plus margin). Before its hello a connection may send a few KiB
    only (common/rpc.py)."""
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

    accepts_cluster_secret: ClassVar[bool] = True
    """Whether the service takes connections that present the cluster secret (NameNode, DataNode); the gateway only
    presents it."""


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (0.0.0.0, ::, "" and names that don't resolve: no)."""
    try:
        infos = socket.getaddrinfo(host, None) if host else []
    except (socket.gaierror, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def require_safe_cluster_secret(settings: ServiceSettings) -> None:
    """Exit with a message when a NameNode or DataNode would accept the public default (or an empty) cluster
    secret beyond loopback: whoever reached its port could write, read and delete blocks. On loopback (or in the
    gateway) it is only logged as a warning. `epochfs up` generates a secret of its own, so neither happens there."""
    if settings.cluster_secret not in ("", DEFAULT_SECRET):
        return
    name = settings.model_config.get("env_prefix", "") + "CLUSTER_SECRET"
    what = "an empty cluster secret" if not settings.cluster_secret else "the default cluster secret"
    if settings.accepts_cluster_secret and not is_loopback(settings.host):
        raise SystemExit(f"epochfs: refusing to listen on {settings.host} with {what}, which anyone can present: "
                         f"whoever reaches the port could write and delete blocks. Set {name} to the same long "
                         f"random string on every service of the cluster (e.g. `openssl rand -base64 32`), or "
                         f"listen on loopback only.")
    logging.getLogger("epochfs").warning(f"using {what} ({name}): fine on loopback, never beyond it; set {name} to "
                                         "a long random string shared by the cluster's services")


def parse_addr(addr: str, default_port: int = 0) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host:
        return addr, default_port
    return host.strip("[]"), int(port)
