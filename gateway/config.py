from __future__ import annotations

from typing import ClassVar

from pydantic_settings import SettingsConfigDict

from epochfs.common import defaults
from epochfs.common.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GW_", extra="ignore")
    accepts_cluster_secret: ClassVar[bool] = False  # it presents the secret to NameNode and DataNodes, serves none

    port: int = 9000
    namenode: str = "127.0.0.1:9871"
    """NameNode RPC address host:port; with several NameNodes (HA) all of them, comma-separated: calls go to the
    active one and follow it on a failover."""
    region: str = "us-east-1"
    users: str = ""
    """S3 users: comma-separated ACCESS_KEY:SECRET_KEY[:OWNER_ID[:DISPLAY_NAME]]. The first one is the root user."""
    admin_users: str = ""
    """Access keys (comma-separated) with admin rights; default: the first user."""
    max_skew_s: int = 900
    """Largest accepted difference between a request's x-amz-date and the gateway's clock."""
    rpc_timeout_s: float = 30.0
    local_reads: bool = True
    """Read blocks of DataNodes on this machine from their files, through the DataNodes' local sockets
    (common/localread.py; EPOCHFS_LOCAL_READS=0 turns it off for every reader), not over RPC."""
    namenode_retry_s: float = 10.0
    """How long a request waits for an unreachable NameNode before answering 503 ServiceUnavailable."""
    max_object_size: int = defaults.MAX_OBJECT_SIZE
    domain: str = ""
    """Domain for virtual-host-style requests: Host `bucket.<domain>` addresses bucket `bucket` and the whole path is
    the key. Any other Host (the domain itself, an IP address) is path style; unset: always path style."""
    access_log: bool = False
    """Log every S3 request (key=value line with its request id); errors are logged either way."""
    access_log_flush_s: float = 60.0
    """Bucket logging: a buffer of server access log records this old is written to its target bucket (as one log
    object) by the next request that logs into it, before that request is answered..."""
    access_log_flush_bytes: int = 1 << 20
    """... or once this large..."""
    access_log_idle_s: float = 300.0
    """... and by a background pass once this old (at least access_log_flush_s) when no request came to roll it."""
    access_log_max_bytes: int = 16 << 20
    """All buffered records together at most this much memory; past it, records are dropped (and counted)."""
    sse_master_key_file: str = ""
    """A file holding the cluster master key (32 bytes, base64) that wraps the data keys of SSE-S3 and SSE-KMS objects:
    every gateway of a cluster needs the same one; it is never sent to the NameNode or the DataNodes. `epochfs up`
    makes one in its data directory. Unset (and no GW_SSE_MASTER_KEY): only SSE-C can be used."""
    sse_master_key: str = ""
    """The master key itself (base64), where a file is not convenient."""
    sse_kms_keys: str = ""
    """KMS key ids (comma-separated) that SSE-KMS requests may name, besides "aws/s3" (the default key); their key
    material is derived from the master key. An unknown id answers KMS.NotFoundException. More can be created at run
    time (admin API POST /admin/v1/kms/keys, `epochfs admin kms create ID`)."""
    kms_refresh_s: float = 5.0
    """How often this gateway loads the KMS key ids created through any gateway's admin API."""
