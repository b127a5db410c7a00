"""Structured logs: one key=value line per record (logfmt), with whatever `extra={...}` the caller passed.

  ts=2025-01-02T03:04:05.678Z level=info logger=epochfs.s3 msg="s3 error" rid=1A2B3C4D000000000007 code=AccessDenied

Values with spaces, quotes or '=' are quoted, so a line splits back into fields with shlex or any logfmt parser.
"""
from __future__ import annotations

import logging
import time

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _value(v) -> str:
    s = str(v)
    if s == "" or any(c in s for c in ' "=\n\t'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return s


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        fields = [("ts", ts), ("level", record.levelname.lower()), ("logger", record.name),
                  ("msg", record.getMessage())]
        fields += [(k, v) for k, v in vars(record).items() if k not in _STANDARD]
        if record.exc_info:
            fields.append(("exc", self.formatException(record.exc_info)))
        return " ".join(f"{k}={_value(v)}" for k, v in fields)
