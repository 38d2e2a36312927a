"""What a window turns into in the database: encoded event payloads and ``asset_event`` rows.

Payloads are encoded once, on the event loop when the window is submitted, so that a
payload that cannot be stored (not JSON, too large: a watcher bug) is found before the
window joins a batch and is resolved as that watcher's rejection instead of failing the
whole batch forever. The rows themselves are built on the writer thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sharedstream.core.message import CoordinateFields, Coordinates
from sharedstream.core.text import lone_surrogate
from sharedstream.kafka.payload import KafkaPayload
from sharedstream.statestore.values import encode_json

# MEDIUMTEXT, the payload column on MySQL/MariaDB, holds at most 2**24 - 1 bytes.
MAX_EVENT_BYTES = 2**24 - 1

# JSON's escape of U+0000, not preceded by an odd run of backslashes (those escape one
# another: "\\u0000" is a backslash, then the text u0000).
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


# What an event is keyed by (with the watcher and its index within the message): the
# coordinates of its message's payload, as ``(topic, topic_id, partition, offset)``.
CoordinatesOf = Callable[[Any], CoordinateFields]


def kafka_coordinates(payload: KafkaPayload) -> CoordinateFields:
    """The coordinates of a Kafka message: its ORIGINAL ones for a replayed dead letter,
    so a replay of a message some watcher already persisted never writes it twice."""
    return payload.origin_fields


class PayloadRefused(ValueError):
    """An event payload the database cannot take; its text is the rejection reason."""


def encode_payload(payload: Any, max_bytes: int) -> str:
    """The JSON text stored for ``payload``; PayloadRefused when it cannot be stored."""
    try:
        text = encode_json(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadRefused(f"event payload not JSON: {exc}") from exc
    # No backend stores a lone surrogate (the remains of bytes decoded with
    # surrogateescape); found here, it is this watcher's rejection, not a failed batch.
    if (found := lone_surrogate(text)) is not None:
        raise PayloadRefused(
            f"event payload not valid Unicode: lone surrogate {found[1]} at character "
            f"{found[0]} of its JSON (decode bytes with errors='replace', or send base64)")
    # PostgreSQL's jsonb holds no U+0000; refused on every database alike, so a watcher's
    # events do not depend on where they are stored.
    if "\\u0000" in text and _NUL.search(text):
        raise PayloadRefused(
            "event payload holds a NUL character (U+0000), which PostgreSQL's jsonb cannot "
            "store: remove it, or send the bytes as base64")
    # A str holds at most 4 UTF-8 bytes per character: measure only when that could matter.
    if len(text) * 4 > max_bytes and (size := len(text.encode("utf-8"))) > max_bytes:
        raise PayloadRefused(
            f"event payload not JSON: {size} bytes, over the {max_bytes}-byte limit")
    return text


def event_rows(asset_id: int, watcher: str, where: Coordinates, texts: list[str],
               created_at: datetime) -> list[dict[str, Any]]:
    """One ``asset_event`` row per encoded payload; the list index is ``event_index``."""
    return [
        {"asset_id": asset_id, "watcher": watcher, "payload": text, "topic": where.topic,
         "topic_id": where.topic_id, "partition": where.partition, "offset": where.offset,
         "event_index": index, "created_at": created_at}
        for index, text in enumerate(texts)
    ]
