"""The gateway: the S3 API on a lean ASGI router, FastAPI for /healthz, /metrics and /admin (API, docs, dashboard)."""
from __future__ import annotations

import hashlib
import logging
import time
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from epochfs.common.messages import BucketRecord, WrittenBlock
from epochfs.common.metrics import CACHE_REQUESTS, gauge, mount_metrics

from .admin.router import mount as mount_admin
from .cluster import Cluster
from .config import GatewaySettings
from .keys import KeyRegistry
from .metrics import S3Metrics
from .s3.bucket_logging import AccessLogFlusher
from .s3.router import S3App, vhost_bucket
from .s3.sse import KeyStore, KmsKeyRefresher
from .s3.sigv4 import SigV4Verifier, User, parse_users

log = logging.getLogger("epochfs.gateway")

# Unsigned requests for these paths go to FastAPI; a SigV4-signed request goes to the S3 API, so buckets named
# "metrics" or "admin" stay reachable through S3 -- except the admin API's own paths, which always go to FastAPI
# (signed or not), so a bucket named "admin" cannot hold keys under "v1/" or named "ui", "docs", "openapi.json".
# A virtual-host-style request (Host bucket.GW_DOMAIN) always goes to the S3 API: its whole path is a key.
FASTAPI_PATHS = ("/healthz", "/metrics", "/admin/")
ADMIN_PATHS = ("/admin/ui", "/admin/docs", "/admin/openapi.json")
ADMIN_PREFIX = "/admin/v1/"
BUCKET_TTL_S = 5.0


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
                               nn_retry_s=settings.namenode_retry_s, local_reads=settings.local_reads)
        self.keys = KeyRegistry(self.users, self.cluster)
        self.s3_verifier = SigV4Verifier(self.keys, max_skew_s=settings.max_skew_s)  # also used by the admin API
        self.metrics = S3Metrics(settings.access_log)
        self.sse_keys = KeyStore(settings)
        self._buckets: dict[str, tuple[float, BucketRecord]] = {}
        self.access_logs = AccessLogFlusher(self, flush_s=settings.access_log_flush_s,
                                            idle_s=settings.access_log_idle_s,
                                            flush_bytes=settings.access_log_flush_bytes,
                                            max_bytes=settings.access_log_max_bytes)

    def is_admin(self, user: User) -> bool:
        return user.admin or user.access_key in self._admins

    def display_name(self, owner_id: str) -> str:
        return self._names.get(owner_id, owner_id)

    async def canonical_ids(self) -> dict[str, str]:
        """Every user the cluster knows: canonical id -> e-mail ("" without one), GW_USERS and the NameNode's keys."""
        out = {u.owner_id: u.email for u in self.users}
        for rec in await self.cluster.namenode.key_list():
            oid = rec.owner_id or hashlib.sha256(rec.access_key.encode()).hexdigest()
            out.setdefault(oid, "")
        return out

    async def bucket(self, name: str) -> BucketRecord:
        """Bucket record (owner, block size...), cached for a few seconds: it only changes by delete + create, and
        both go through forget_bucket on this gateway."""
        hit = self._buckets.get(name)
        now = time.monotonic()
        if hit is not None and now - hit[0] < BUCKET_TTL_S:
            CACHE_REQUESTS.labels("buckets", "hit").inc()
            return hit[1]
        CACHE_REQUESTS.labels("buckets", "miss").inc()
        info = await self.cluster.namenode.bucket_info(name)
        self._buckets[name] = (now, info)
        return info

    def forget_bucket(self, name: str) -> None:
        self._buckets.pop(name, None)
        self.cluster.forget_bucket(name)

    async def abandon(self, blocks: list[WrittenBlock]) -> None:
        """Give back the blocks of an upload that will not be committed."""
        await self.cluster.abandon([b.id for b in blocks if b])


def _to_fastapi(scope, domain: str) -> bool:
    path = scope["path"]
    if not (path.startswith(FASTAPI_PATHS) or path in ADMIN_PATHS):
        return False
    if domain and vhost_bucket(_host(scope), domain) is not None:
        return False  # virtual-host style: the path is a key in that bucket
    return path.startswith(ADMIN_PREFIX) or path in ADMIN_PATHS or not _signed(scope)


def _host(scope) -> str | None:
    for k, v in scope["headers"]:
        if k == b"host":
            return v.decode("latin-1")
    return None


def _signed(scope) -> bool:
    """Signed for S3 (SigV4 or SigV2); a Bearer or Basic header is for FastAPI's paths (/metrics with a token)."""
    if b"X-Amz-Signature=" in scope.get("query_string", b""):
        return True
    return any(k == b"authorization" and v.startswith(b"AWS") for k, v in scope["headers"])


def create_app(settings: GatewaySettings):
    ctx = GatewayContext(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        kms = KmsKeyRefresher(ctx.sse_keys, ctx.cluster.namenode, settings.kms_refresh_s)
        with anyio.move_on_after(5):  # the created KMS key ids before the first request (else the worker retries)
            try:
                await kms.run_once()
            except Exception as e:
                log.warning("KMS key ids not loaded yet", extra={"reason": repr(e)})
        async with anyio.create_task_group() as tg:
            tg.start_soon(ctx.access_logs.run_forever)
            tg.start_soon(kms.run_forever)
            yield
            tg.cancel_scope.cancel()
        with anyio.move_on_after(10):  # a clean stop delivers the access log records still buffered
            await ctx.access_logs.run_once(force=True)
        await ctx.cluster.close()

    api = FastAPI(title="epochfs gateway", lifespan=lifespan, docs_url="/admin/docs",
                  openapi_url="/admin/openapi.json")
    api.state.ctx = ctx

    @api.get("/healthz", include_in_schema=False)  # not the admin API's: a signed GET /healthz is S3's
    async def healthz():
        return {"status": "ok"}

    gauge("epochfs_gateway_namenode", "The NameNode this gateway's calls go to now (1; HA: the active one as last "
          "seen). Moves and redirects: epochfs_namenode_client_moves_total, epochfs_namenode_client_redirects_total",
          lambda: [((ctx.cluster.namenode.address,), 1)], labels=("address",))
    mount_metrics(api, settings.metrics_token)
    mount_admin(api)
    s3 = S3App(ctx)

    async def app(scope, receive, send):
        if scope["type"] != "http" or _to_fastapi(scope, settings.domain):
            await api(scope, receive, send)
        else:
            await s3(scope, receive, send)

    app.state = api.state  # tests and the CLI reach the context through app.state
    return app
