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
from collections.abc import Hashable, Mapping
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


class _Named:
    """A group key as its log text: the consumer group id, with no quotes under %r."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


class GroupNames(logging.Filter):
    """Shows shared-stream group keys as users name the groups: their consumer group ids.

    The engine (``sharedstream.core``) knows a group only by its key, a tuple such as
    ``('kafka-shared-stream', ('orders',), 'kafka_default')``; an operator knows it by
    the consumer group id that ``check``, the metrics and the broker's tools show. The
    process names its groups here, and every ``sharedstream.*`` logger existing then
    gets this filter, so whatever handlers the host configured (``sharedstream run``'s
    or an embedding program's) print the id, and JSON lines get a ``group`` field.
    """

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[Hashable, str] = {}
        self._loggers: list[logging.Logger] = []

    def install(self, names: Mapping[Hashable, str]) -> None:
        self.names = dict(names)
        self._loggers = [logger for name, logger in logging.root.manager.loggerDict.items()
                         if name.startswith("sharedstream.")
                         and isinstance(logger, logging.Logger)]
        for logger in self._loggers:
            logger.addFilter(self)

    def uninstall(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers = []

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and self.names:
            found = [self._name(a) if isinstance(a, tuple) else None for a in args]
            if any(name is not None for name in found):
                record.args = tuple(a if name is None else _Named(name)
                                    for a, name in zip(args, found, strict=True))
                if getattr(record, "group", None) is None:
                    record.group = next(name for name in found if name is not None)
        return True

    def _name(self, key: tuple[Any, ...]) -> str | None:
        try:
            return self.names.get(key)
        except TypeError:  # a tuple holding something unhashable is no group key
            return None
