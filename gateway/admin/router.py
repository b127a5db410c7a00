"""The admin API, mounted on the gateway's FastAPI app: /admin/v1/... (JSON), /admin/ui (the dashboard)."""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from epochfs.common import errors

from . import buckets, cluster, keys, ui

PREFIX = "/admin/v1"
# domain errors from the NameNode -> HTTP status of the admin API
_STATUS = ((errors.NotFound, 404), (errors.Conflict, 409), (errors.QuotaExceeded, 403), (errors.InvalidInput, 400),
           (errors.Unavailable, 503))


async def domain_error(request: Request, exc: errors.DomainError) -> JSONResponse:
    status = next((s for cls, s in _STATUS if isinstance(exc, cls)), 500)
    return JSONResponse({"detail": exc.message}, status_code=status)


def mount(api: FastAPI) -> None:
    for r in (cluster.router, buckets.router, keys.router):
        api.include_router(r, prefix=PREFIX)
    api.include_router(ui.router)
    api.add_exception_handler(errors.DomainError, domain_error)
