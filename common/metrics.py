"""Prometheus metrics: every service serves /metrics from the default prometheus-client registry.

Counters that code increments live as module globals; values a service already knows (block counts, node states,
replication queues) are read at scrape time by a gauge callback that the service's app registers with `gauges`.
"""
from __future__ import annotations

import base64
import binascii
import hmac
from typing import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from starlette.responses import Response

CACHE_REQUESTS = Counter("epochfs_cache_requests_total", "Lookups in in-process caches", ["cache", "result"])
RPC_CALLS = Counter("epochfs_rpc_calls_total", "Internal RPC requests served, by operation", ["op"])
# the NameNode client of this process (common/clients.py), following the active NameNode (HA)
NN_LEADER_CHANGES = Counter("epochfs_namenode_client_moves_total",
                            "Times this process's NameNode calls moved to another NameNode address (a failover, "
                            "a NotLeader redirect, an address out of reach)")
NN_REDIRECTS = Counter("epochfs_namenode_client_redirects_total",
                       "NotLeader answers this process got from a standby NameNode (each one redirects the call)")
NN_STALE_READS = Counter("epochfs_namenode_client_stale_reads_total",
                         "Reads this process sent as stale reads (messages.StaleOk): answered by a standby NameNode "
                         "(standby), or by the active one after a standby refused or was out of reach (active)",
                         ["by"])

_SERIES: dict[tuple, object] = {}


def series(metric, *labels):
    """metric.labels(*labels), kept: labels() validates and locks on every call (~4% of the gateway's CPU per GET)."""
    key = (metric, *labels)
    s = _SERIES.get(key)
    if s is None:
        s = _SERIES[key] = metric.labels(*(str(v) for v in labels))
    return s

# name -> (help, label names, callback returning [(label values, value)])
GaugeFn = Callable[[], Iterable[tuple[tuple[str, ...], float]]]
_GAUGES: dict[str, tuple[str, tuple[str, ...], GaugeFn]] = {}


class _ScrapeTimeGauges:
    def collect(self):
        for name, (help_, labels, fn) in list(_GAUGES.items()):
            fam = GaugeMetricFamily(name, help_, labels=list(labels))
            try:
                samples = list(fn())
            except Exception:  # a service still starting (no state yet) exports nothing rather than failing
                continue
            for values, v in samples:
                fam.add_metric(list(values), float(v))
            yield fam


REGISTRY.register(_ScrapeTimeGauges())


def gauge(name: str, help_: str, fn: GaugeFn, labels: tuple[str, ...] = ()) -> None:
    """Export `fn()` as the gauge `name` at every scrape (a later app in the same process replaces an earlier one)."""
    _GAUGES[name] = (help_, labels, fn)


def token_presented(authorization: str, token: str) -> bool:
    """Whether an Authorization header carries `token`: `Bearer <token>`, or HTTP Basic with it as the password
    (what Prometheus' `authorization` and `basic_auth` scrape settings send)."""
    scheme, _, cred = authorization.partition(" ")
    if scheme.lower() == "bearer":
        given = cred.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    else:
        return False
    return hmac.compare_digest(given.encode(), token.encode())


def mount_metrics(app, token: str = "") -> None:
    """Serve /metrics itself (a mounted sub-app would answer /metrics with a redirect to /metrics/); with a
    `token`, only to requests that present it (the NameNode's metrics name every bucket)."""
    async def metrics(request):
        if token and not token_presented(request.headers.get("authorization", ""), token):
            return Response("/metrics needs the metrics token (Authorization: Bearer TOKEN)\n", status_code=401,
                            headers={"WWW-Authenticate": 'Bearer realm="metrics", Basic realm="metrics"'})
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
    app.add_route("/metrics", metrics, include_in_schema=False)
