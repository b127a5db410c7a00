"""Prometheus metrics: every service serves /metrics from the default prometheus-client registry."""
from __future__ import annotations

from prometheus_client import make_asgi_app


def mount_metrics(app) -> None:
    app.mount("/metrics", make_asgi_app())
