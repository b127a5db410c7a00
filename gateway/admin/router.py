"""The admin API, mounted on the gateway's FastAPI app: /admin/v1/... (JSON), /admin/ui (the dashboard)."""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import Match

from epochfs.common import errors

from . import buckets, cluster, ha, keys, ui

PREFIX = "/admin/v1"
# domain errors from the NameNode -> HTTP status of the admin API
_STATUS = ((errors.NotFound, 404), (errors.Conflict, 409), (errors.QuotaExceeded, 403), (errors.InvalidInput, 400),
           (errors.Unavailable, 503))


async def domain_error(request: Request, exc: errors.DomainError) -> JSONResponse:
    status = next((s for cls, s in _STATUS if isinstance(exc, cls)), 500)
    return JSONResponse({"detail": exc.message}, status_code=status)


async def method_not_allowed(request: Request, exc: HTTPException):
    """A 405's Allow header lists every method of the path (Starlette names only the first route's)."""
    if exc.status_code != 405:
        return await http_exception_handler(request, exc)
    methods = sorted({m for r in request.app.routes if isinstance(r, APIRoute)
                      and r.matches({**request.scope, "method": next(iter(r.methods))})[0] == Match.FULL
                      for m in r.methods})
    return JSONResponse({"detail": exc.detail}, status_code=405, headers={"Allow": ", ".join(methods)})


def mount(api: FastAPI) -> None:
    for r in (cluster.router, ha.router, buckets.router, keys.router):
        api.include_router(r, prefix=PREFIX)
    api.include_router(ui.router)
    api.add_exception_handler(errors.DomainError, domain_error)
    api.add_exception_handler(HTTPException, method_not_allowed)
