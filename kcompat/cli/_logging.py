"""Broker logging: text lines (default) or JSON lines (``--log-format json``).

``KCOMPAT_LOG_LEVEL`` and ``KCOMPAT_LOG_FORMAT`` override the flags, as every
``KCOMPAT_*`` variable overrides the command line. A JSON line carries ``ts``
(ISO 8601, UTC), ``level``, ``logger``, ``msg`` and, for an exception, ``exc``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime

from kcompat.broker.config.configdef import ConfigError

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line)


def resolve(level: str | None, fmt: str | None) -> tuple[str, str]:
    """(level, format) after env overrides; a bad one is a ConfigError naming it."""
    level = (os.environ.get("KCOMPAT_LOG_LEVEL") or level or "INFO").upper()
    fmt = (os.environ.get("KCOMPAT_LOG_FORMAT") or fmt or "text").lower()
    if level not in LEVELS:
        raise ConfigError("--log-level", f"{level!r} is not one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ConfigError("--log-format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    return level, fmt


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level))
