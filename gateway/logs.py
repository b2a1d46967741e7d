"""Named loggers of the gateway, and the one place logging is configured.

Pure modules never log; I/O shells log through these names so operators can filter them.
"""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["server_log", "access_log", "configure_logging", "JsonFormatter"]

server_log = logging.getLogger("gateway.server")
access_log = logging.getLogger("gateway.access")

_RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(*, fmt: str, level: str) -> None:
    """Send every log record to stderr (journald under systemd) in ``fmt`` ("text" or "json")."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's own access logger would duplicate gateway.access.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
