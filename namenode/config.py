from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from epochfs.common.blocks import DEFAULT_BLOCK_SIZE
from epochfs.common.config import ServiceSettings


class NameNodeSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NN_", extra="ignore")

    port: int = 9870
    rpc_port: int = 9871
    block_size: int = DEFAULT_BLOCK_SIZE
    """Default block size of new buckets (bytes)."""
    replication: int = 3
    """Default replication factor of new buckets."""
    heartbeat_timeout_s: float = 10.0
    """A DataNode silent for longer than this is not chosen for new blocks."""
    pending_grace_s: float = 3600.0
    """Blocks allocated but not committed for this long (an upload cut off mid-way) are garbage-collected."""
    gc_interval_s: float = 10.0
    min_part_size: int = 5 << 20
    """Minimum size of every multipart part but the last (S3: 5 MiB)."""
