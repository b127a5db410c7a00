"""What the admin routers share: the gateway context."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request


def get_ctx(request: Request):
    return request.app.state.ctx


CtxDep = Annotated[object, Depends(get_ctx)]
BAD_BODY = {400: {"description": "the body is not JSON"}}  # what FastAPI answers before validating it
