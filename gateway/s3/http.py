"""What an S3 handler returns: status, headers and a body (bytes, or an async iterator of bytes to stream)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator


@dataclass(slots=True)
class Response:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | AsyncIterator[bytes] = b""
    length: int | None = None  # Content-Length for a streamed body
