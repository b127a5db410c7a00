"""Running a service: uvicorn on uvloop + httptools, logs configured once, clean exit on SIGTERM/SIGINT."""
from __future__ import annotations

import logging
from typing import Callable

import uvicorn

from .config import ServiceSettings
from .logfmt import LogfmtFormatter


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(LogfmtFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])


def serve(create_app: Callable, settings: ServiceSettings) -> None:
    setup_logging(settings.log_level)
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, loop="uvloop", http="httptools",
                log_level="warning", access_log=False, timeout_graceful_shutdown=5, lifespan="on",
                timeout_keep_alive=settings.keep_alive_s)
