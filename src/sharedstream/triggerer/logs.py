"""Log output of the long-running commands: text for people, JSON lines for collectors.

``--log-format json`` writes one JSON object per line: ``time`` (ISO-8601, UTC),
``level``, ``logger``, ``message``, ``exception`` when there is one, and the fields
a log call names with ``extra=`` (:data:`FIELDS`: the watcher, group, topic,
partition, offset, destination) wherever the code knows them.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

FIELDS = ("watcher", "group", "topic", "partition", "offset", "destination")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str, fmt: str) -> None:
    """Root logging for a command: ``fmt`` is ``text`` or ``json``, to stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    if level.upper() != "DEBUG":
        logging.getLogger("alembic").setLevel(logging.WARNING)  # its context lines
