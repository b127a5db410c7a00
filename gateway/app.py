"""The gateway: the S3 API on a lean ASGI router, FastAPI for /healthz, /metrics and (later) /admin."""
from __future__ import annotations

import time
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import Counter, Histogram

from epochfs.common.metrics import mount_metrics

from .cluster import Cluster
from .config import GatewaySettings
from .s3.router import S3App
from .s3.sigv4 import User, parse_users

S3_REQUESTS = Counter("epochfs_s3_requests_total", "S3 requests", ["method", "status"])
S3_LATENCY = Histogram("epochfs_s3_request_seconds", "S3 request latency", ["method"])

# Unsigned requests for these paths go to FastAPI; a SigV4-signed request always goes to the S3 API, so buckets
# named "metrics" or "admin" stay reachable through S3.
FASTAPI_PATHS = ("/healthz", "/metrics", "/admin/")
BUCKET_TTL_S = 5.0


class S3Metrics:
    def observe(self, req, resp, seconds: float) -> None:
        m = req.method if req is not None else "?"
        S3_REQUESTS.labels(m, str(resp.status)).inc()
        S3_LATENCY.labels(m).observe(seconds)


class GatewayContext:
    """What every S3 handler needs: the cluster, the users, the settings, and a short-lived bucket cache."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.users: list[User] = parse_users(settings.users)
        if not self.users:
            raise ValueError("the gateway needs at least one user (GW_USERS=ACCESS:SECRET[:OWNER_ID[:NAME]])")
        admins = {a.strip() for a in settings.admin_users.split(",") if a.strip()} or {self.users[0].access_key}
        self._admins = admins
        self._names = {u.owner_id: u.display_name for u in self.users}
        self.cluster = Cluster(settings.namenode, settings.cluster_secret, rpc_timeout_s=settings.rpc_timeout_s,
                               nn_retry_s=settings.namenode_retry_s)
        self.metrics = S3Metrics()
        self._buckets: dict[str, tuple[float, dict]] = {}

    def is_admin(self, user: User) -> bool:
        return user.access_key in self._admins

    def display_name(self, owner_id: str) -> str:
        return self._names.get(owner_id, owner_id)

    async def bucket(self, name: str) -> dict:
        """Bucket record (owner, block size...), cached for a few seconds: it only changes by delete + create, and
        both go through forget_bucket on this gateway."""
        hit = self._buckets.get(name)
        now = time.monotonic()
        if hit is not None and now - hit[0] < BUCKET_TTL_S:
            return hit[1]
        info = await self.cluster.nn("bucket_info", bucket=name)
        self._buckets[name] = (now, info)
        return info

    def forget_bucket(self, name: str) -> None:
        self._buckets.pop(name, None)
        self.cluster.forget_bucket(name)

    async def abandon(self, blocks: list) -> None:
        """Give back the blocks of an upload that will not be committed."""
        await self.cluster.abandon([b[0] for b in blocks if b])


def _signed(scope) -> bool:
    if b"X-Amz-Signature=" in scope.get("query_string", b""):
        return True
    return any(k == b"authorization" for k, _ in scope["headers"])


def create_app(settings: GatewaySettings):
    ctx = GatewayContext(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await ctx.cluster.close()

    api = FastAPI(title="epochfs gateway", lifespan=lifespan, docs_url="/admin/docs",
                  openapi_url="/admin/openapi.json")
    api.state.ctx = ctx

    @api.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    mount_metrics(api)
    s3 = S3App(ctx)

    async def app(scope, receive, send):
        if scope["type"] != "http" or (scope["path"].startswith(FASTAPI_PATHS) and not _signed(scope)):
            await api(scope, receive, send)
        else:
            await s3(scope, receive, send)

    app.state = api.state  # tests and the CLI reach the context through app.state
    return app
