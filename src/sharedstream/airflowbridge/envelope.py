"""The Kafka record the bridge writes for one Airflow asset event (format version 1).

Key: the asset URI (UTF-8), so every event of one asset lands on one partition and
keeps its order. Value: UTF-8 JSON::

    {"version": 1,
     "source": "team_a",                       # [airflow.<name>] of the instance it came from
     "asset": {"name": "orders", "uri": "s3://bucket/orders"},
     "event_id": 42,                           # the event's id in the source instance
     "timestamp": "2026-01-01T10:00:00.123456Z",
     "extra": {...}}                           # the event's extra, as the source stored it

An event the sink creates in a target carries :data:`MARKER` in its ``extra``
(``{"source": ..., "event_id": ...}``): the publisher of that target skips such
events, so an event never travels back (loop prevention), and the sink looks for
it in the target before posting (duplicate prevention).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

VERSION = 1
MARKER = "sharedstream_bridge"


class EnvelopeError(ValueError):
    """A record on the bridge topic that is not a version-1 envelope."""


def parse_timestamp(text: str) -> datetime:
    """Airflow's ISO-8601 timestamps as aware UTC datetimes (naive ones read as UTC)."""
    parsed = datetime.fromisoformat(text)
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Envelope:
    source: str
    asset_name: str
    asset_uri: str
    event_id: int
    timestamp: str
    extra: dict[str, Any]

    @classmethod
    def from_event(cls, source: str, event: dict[str, Any]) -> Envelope:
        """From one item of ``GET /api/v2/assets/events``."""
        return cls(source=source, asset_name=str(event["name"]), asset_uri=str(event["uri"]),
                   event_id=int(event["id"]), timestamp=str(event["timestamp"]),
                   extra=dict(event.get("extra") or {}))

    def key(self) -> bytes:
        return self.asset_uri.encode("utf-8")

    def to_bytes(self) -> bytes:
        return json.dumps({
            "version": VERSION, "source": self.source,
            "asset": {"name": self.asset_name, "uri": self.asset_uri},
            "event_id": self.event_id, "timestamp": self.timestamp, "extra": self.extra,
        }, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, value: bytes | None) -> Envelope:
        """Parse a record value; :class:`EnvelopeError` says what is wrong with it."""
        if value is None:
            raise EnvelopeError("tombstone (no value)")
        try:
            data = json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EnvelopeError(f"not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise EnvelopeError(f"not a version-{VERSION} bridge envelope")
        try:
            asset = data["asset"]
            envelope = cls(source=str(data["source"]), asset_name=str(asset["name"]),
                           asset_uri=str(asset["uri"]), event_id=int(data["event_id"]),
                           timestamp=str(data["timestamp"]), extra=dict(data["extra"] or {}))
            parse_timestamp(envelope.timestamp)
        except (KeyError, TypeError, ValueError) as exc:
            raise EnvelopeError(f"malformed envelope: {type(exc).__name__}: {exc}") from None
        return envelope

    def marker(self) -> dict[str, Any]:
        """What the sink puts under :data:`MARKER` in the target event's ``extra``."""
        return {"source": self.source, "event_id": self.event_id}

    def bridged_extra(self) -> dict[str, Any]:
        """The ``extra`` posted to a target: the source's extra plus the marker."""
        return {**self.extra, MARKER: self.marker()}


def is_bridged(event: dict[str, Any]) -> bool:
    """True for an event the sink created (it came from another instance)."""
    extra = event.get("extra")
    return isinstance(extra, dict) and MARKER in extra
