"""Dead-letter record headers: names and (de)serialisation, importable without Kafka.

A dead-letter record is the original record (key, value, timestamp, headers)
plus the headers below, all named ``sharedstream.*``. While tracing is on, it also
has :data:`TRACEPARENT`, naming the ``sharedstream.dead_letter`` span, the child of the
rejecting watcher's watch span (the producer's own ``traceparent``, if any, stays among
the original headers); a replay keeps both,
and the replayed message's watch span links back to the dead-letter span. Tools (``dlq inspect``,
``dlq replay``) and the producer share this module so names never drift.

Replay: ``dlq replay`` republishes a dead-letter record with
:func:`replay_headers`, which bumps the replay count, onto the dead-letter topic's
replay topic (:func:`replay_topic_name`), which only the groups dead-lettering there
read, so applications reading the original topic never see a replay (or, when asked,
onto the original topic). The producer recognises such a record
(:func:`parse_replay`), addresses it only to the watchers that rejected it, and keys
its events by the *original* coordinates, so a replayed message can never duplicate
an event of the original one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sharedstream import tracing
from sharedstream.core.message import Coordinates, KafkaMessage
from sharedstream.core.text import storable_text
from sharedstream.tracing.context import DEAD_LETTER_TRACEPARENT

PREFIX = "sharedstream."
ORIGINAL_TOPIC = "sharedstream.original.topic"
ORIGINAL_TOPIC_ID = "sharedstream.original.topic_id"
ORIGINAL_PARTITION = "sharedstream.original.partition"
ORIGINAL_OFFSET = "sharedstream.original.offset"
ORIGINAL_TIMESTAMP = "sharedstream.original.timestamp"
CONSUMER_GROUP = "sharedstream.consumer_group"
# JSON object {watcher name: reason}; its keys are the rejecting watchers.
REJECTIONS = "sharedstream.rejections"
# "<topic id>:<partition>:<offset>" of the original record: dedupe key for tools.
IDENTITY = "sharedstream.identity"
# How many times this message has been replayed from the DLQ (0 for a first rejection).
REPLAY_COUNT = "sharedstream.replay_count"
# Optional (tracing on): the W3C traceparent of the span that dead-lettered the record.
TRACEPARENT = DEAD_LETTER_TRACEPARENT

ALL_HEADERS = (
    ORIGINAL_TOPIC,
    ORIGINAL_TOPIC_ID,
    ORIGINAL_PARTITION,
    ORIGINAL_OFFSET,
    ORIGINAL_TIMESTAMP,
    CONSUMER_GROUP,
    REJECTIONS,
    IDENTITY,
    REPLAY_COUNT,
)

Headers = Sequence[tuple[str, bytes | None]]

REPLAY_SUFFIX = ".replay"


def replay_topic_name(dlq_topic: str) -> str:
    """The replay topic of a dead-letter topic: what ``dlq replay`` writes by default and
    every group with that ``dlq_topic`` reads besides its watched topics."""
    return dlq_topic + REPLAY_SUFFIX


@dataclass(frozen=True, slots=True)
class Replay:
    """A replayed dead letter read from a watched topic."""

    origin: Coordinates
    rejections: Mapping[str, str]
    replay_count: int


def user_headers(headers: Iterable[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    """The record's own headers, without any ``sharedstream.*`` ones (from an earlier trip)."""
    return [(k, v) for k, v in headers if not k.startswith(PREFIX)]


def build_dlq_headers(
    *,
    original_headers: Iterable[tuple[str, bytes | None]],
    origin: Coordinates,
    consumer_group: str,
    rejections: Mapping[str, str],
    replay_count: int,
    message: KafkaMessage | None = None,
) -> list[tuple[str, bytes | None]]:
    """Headers of a dead-letter record: the user's headers first, then ours.

    ``message``, the rejected record, lets the dead-letter span (tracing on) be the child
    of the rejecting watchers' watch spans.

    Reasons go through :func:`~sharedstream.core.text.storable_text`: a lone surrogate
    cannot be encoded (the record could never be sent) and a huge reason would make every
    record too large for the DLQ topic; a NUL is written as ``\\u0000``, as in
    ``rejected_message``.
    """
    ours = {
        ORIGINAL_TOPIC: origin.topic,
        ORIGINAL_TOPIC_ID: origin.topic_id,
        ORIGINAL_PARTITION: str(origin.partition),
        ORIGINAL_OFFSET: str(origin.offset),
        ORIGINAL_TIMESTAMP: str(origin.timestamp),
        CONSUMER_GROUP: consumer_group,
        REJECTIONS: json.dumps({watcher: storable_text(reason)
                                for watcher, reason in sorted(rejections.items())},
                               ensure_ascii=False),
        IDENTITY: origin.identity,
        REPLAY_COUNT: str(replay_count),
    }
    if tracing.tracer is not None:
        original_headers = list(original_headers)
        traced = tracing.dead_letter(original_headers, source_topic=origin.topic,
                                     consumer_group=consumer_group, rejections=rejections,
                                     message=message)
        if traced is not None:
            ours[TRACEPARENT] = traced
    out = user_headers(original_headers)
    out.extend((k, v.encode()) for k, v in ours.items())
    return out


def _last(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for k, v in headers:
        if k.startswith(PREFIX) and v is not None:
            found[k] = v.decode("utf-8", "replace")
    return found


def parse_replay(headers: Iterable[tuple[str, bytes | None]]) -> Replay | None:
    """The replay information of a record, or None when it is not a replayed dead letter.

    A record counts as a replay only with a replay count of at least 1 and every
    coordinate header present and well-formed; anything else is an ordinary
    message for the whole cohort (never silently addressed to nobody).
    """
    found = _last(headers)
    try:
        count = int(found[REPLAY_COUNT])
        if count < 1:
            return None
        rejections = json.loads(found[REJECTIONS])
        origin = Coordinates(
            topic=found[ORIGINAL_TOPIC],
            topic_id=found[ORIGINAL_TOPIC_ID],
            partition=int(found[ORIGINAL_PARTITION]),
            offset=int(found[ORIGINAL_OFFSET]),
            timestamp=int(found[ORIGINAL_TIMESTAMP]),
        )
    except (KeyError, ValueError):
        return None
    if not isinstance(rejections, dict) or not rejections:
        return None
    return Replay(origin, {str(k): str(v) for k, v in rejections.items()}, count)


def replay_headers(
    dlq_headers: Iterable[tuple[str, bytes | None]],
) -> list[tuple[str, bytes | None]]:
    """Headers to republish a dead-letter record (count + 1), to its replay topic or any other."""
    headers = list(dlq_headers)
    count = int(_last(headers).get(REPLAY_COUNT, "0")) + 1
    out = [(k, v) for k, v in headers if k != REPLAY_COUNT]
    out.append((REPLAY_COUNT, str(count).encode()))
    return out
