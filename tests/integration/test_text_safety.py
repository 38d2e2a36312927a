"""Issue 25.1: text a database or a Kafka header cannot take must never stall a partition.

A real ``sharedstream run`` process on the real broker, over SQLite, PostgreSQL and
MariaDB (watchers in ``text_watchers.py``). Before the fix:

* a rejection without a dead-letter topic whose value preview or reason held a NUL
  character was refused by PostgreSQL for ever ("\\u0000 cannot be converted to text"):
  the rejection recorder retried, the committed offset never passed the message;
* a reason holding a lone surrogate (bytes decoded with ``surrogateescape``) could not be
  encoded on any backend, nor as a dead-letter header;
* a 10 MB reason overflowed MariaDB's TEXT column (held for ever) and made every
  dead-letter record too large for the broker.

The documented handling (docs/dead-letters.md, "Reasons and previews as stored"): NUL and
lone surrogates in free text are written as the six characters of their ``\\uXXXX``
escape, and free text is cut to ``MAX_TEXT_CHARS`` with a marker. An event payload that
is not valid Unicode is that watcher's rejection, named in the reason.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from streams import committed, create_schema
from triggerer import Triggerer, connection_for, until, write_config

from kafka_writes import ordered_producer
from sharedstream.core.text import MAX_TEXT_CHARS
from sharedstream.delivery import undelivered
from sharedstream.ops.dlq import read_dead_letters
from sharedstream.statestore import StateStore
from sharedstream.statestore.events import events_after, insert_events
from sharedstream.statestore.models import asset_event, rejected_message
from sharedstream.statestore.types import utcnow

WATCHERS = Path(__file__).resolve().parent / "text_watchers.py"
NO_DLQ = " (not dead-lettered: no dead-letter topic configured)"


def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Write ``values`` in order to partition 0, acknowledged before returning."""
    failures: list[str] = []
    producer = ordered_producer(bootstrap)
    for value in values:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda e, _m: failures.append(str(e)) if e else None)
    assert producer.flush(30) == 0 and not failures, failures


@pytest.fixture
def run_watchers(tmp_path: Path, kafka_bootstrap: str) -> Iterator[Any]:
    """Start ``sharedstream run text_watchers.py``; killed when the test ends."""
    started: list[Triggerer] = []

    def start(db_url: str, topic: str, watchers: str, dlq: str = "") -> str:
        create_schema(db_url)
        connection = connection_for(kafka_bootstrap, "text")
        config = write_config(tmp_path / "sharedstream.toml", database_url=db_url,
                              connection=connection, connection_id="text")
        process = Triggerer(WATCHERS, config, tmp_path, env={
            "TEXT_TOPIC": topic, "TEXT_DLQ": dlq, "TEXT_WATCHERS": watchers}).start()
        started.append(process)
        return f"{connection['group.id']}.{topic}"

    yield start
    for process in started:
        process.kill()


def wait_committed(bootstrap: str, group: str, topic: str, offset: int) -> None:
    until(lambda: committed(bootstrap, group, topic, 1) == {0: offset},
          f"{group} committed offset {offset} on {topic}", timeout=90, interval=0.2)


def rejected_rows(db_url: str) -> dict[int, tuple[str, str, str | None]]:
    """offset -> (watcher, reason, value_preview) of every rejected_message row."""
    engine = sa.create_engine(db_url)
    r = rejected_message.c
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.select(r.offset, r.watcher, r.reason,
                                                r.value_preview)).all()
    finally:
        engine.dispose()
    return {row.offset: (row.watcher, row.reason, row.value_preview) for row in rows}


def event_offsets(db_url: str) -> list[tuple[str, int, Any]]:
    engine = sa.create_engine(db_url)
    e = asset_event.c
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.select(e.watcher, e.offset, e.payload)
                                      .order_by(e.offset)).all()
    finally:
        engine.dispose()
    return [(row.watcher, row.offset, json.loads(row.payload)) for row in rows]


def test_issue_25_a_rejected_confluent_framed_value_does_not_stall_the_partition(
        db_url: str, kafka_bootstrap: str, create_topic: Any, run_watchers: Any) -> None:
    """The issue's scenario exactly: no dlq_topic, the framed value is rejected."""
    topic = create_topic("framed")
    produce_values(kafka_bootstrap, topic,
                   [b'{"a":0}', b'\x00\x00\x00\x00\x07{"a":1}', b'{"a":2}'])
    group = run_watchers(db_url, topic, "framed")
    wait_committed(kafka_bootstrap, group, topic, 3)

    assert rejected_rows(db_url) == {
        1: ("framed", "framed" + NO_DLQ, '\\u0000\\u0000\\u0000\\u0000\x07{"a":1}')}
    assert event_offsets(db_url) == [("framed", 0, {"a": 0}), ("framed", 2, {"a": 2})]


def test_reasons_with_nul_surrogates_or_10_mb_are_recorded_and_committed_past(
        db_url: str, kafka_bootstrap: str, create_topic: Any, run_watchers: Any) -> None:
    topic = create_topic("hostile")
    produce_values(kafka_bootstrap, topic, [
        b"first", b"reject:bad\x00reason", b"reject:bad \xff byte", b"reject-huge",
        b"payload:\xfe", b"last"])
    group = run_watchers(db_url, topic, "hostile")
    wait_committed(kafka_bootstrap, group, topic, 6)

    rows = rejected_rows(db_url)
    assert sorted(rows) == [1, 2, 3, 4], rows
    assert rows[1] == ("hostile", "bad\\u0000reason" + NO_DLQ, "reject:bad\\u0000reason")
    assert rows[2] == ("hostile", "bad \\udcff byte" + NO_DLQ, "reject:bad \ufffd byte")
    _, huge, _ = rows[3]
    assert len(huge) <= MAX_TEXT_CHARS and huge.startswith("x" * (MAX_TEXT_CHARS // 2)), \
        len(huge)
    assert huge.endswith(" characters]"), huge[-80:]
    _, payload_reason, _ = rows[4]
    assert "not valid Unicode" in payload_reason and "\\udcfe" in payload_reason, \
        payload_reason
    assert [(w, o) for w, o, _ in event_offsets(db_url)] == [("hostile", 0), ("hostile", 5)]


def test_dead_letter_reasons_with_nul_surrogates_or_10_mb_reach_the_dlq(
        kafka_bootstrap: str, create_topic: Any, run_watchers: Any, tmp_path: Path) -> None:
    """The same reasons with a dead-letter topic: every record reaches the DLQ (none is
    too large for it any more), with the reasons stored as documented."""
    db_url = f"sqlite:///{tmp_path / 'state.db'}"
    topic, dlq = create_topic("hostile"), create_topic("hostile-dlq")
    produce_values(kafka_bootstrap, topic, [
        b"reject:bad\x00reason", b"reject:bad \xff byte", b"reject-huge", b"last"])
    group = run_watchers(db_url, topic, "hostile", dlq)
    wait_committed(kafka_bootstrap, group, topic, 4)

    reasons = {record.origin.offset: record.rejections["hostile"]
               for record in read_dead_letters({"bootstrap.servers": kafka_bootstrap}, dlq,
                                               timeout=30)
               if record.origin is not None}
    assert sorted(reasons) == [0, 1, 2], reasons.keys()
    assert reasons[0] == "bad\\u0000reason"
    assert reasons[1] == "bad \\udcff byte"
    assert len(reasons[2]) <= MAX_TEXT_CHARS and reasons[2].endswith(" characters]")
    assert rejected_rows(db_url) == {}


def test_a_destination_refusal_with_nul_surrogates_or_10_mb_is_recorded(db_url: str) -> None:
    """``undelivered_event`` reasons (a webhook's answer, an exception) on the real backend:
    a refused record would hold the destination's cursor for ever."""
    store = StateStore.from_url(db_url)
    try:
        store.upgrade()
        asset_id = store.register_asset("orders")
        with store.engine.begin() as connection:
            insert_events(connection, [
                {"asset_id": asset_id, "watcher": "w", "payload": "{}", "topic": "t",
                 "topic_id": "id", "partition": 0, "offset": n, "event_index": 0,
                 "created_at": utcnow()} for n in range(3)])
            ids = [e.id for e in events_after(connection, 0, limit=3)]
        undelivered.record(store.engine, "hooks", [
            (ids[0], "webhook answered 400: a\x00b"), (ids[1], "bad \udcff byte"),
            (ids[2], "x" * 10_000_000)], utcnow())
        reasons = {u.event.id: u.reason for u in undelivered.listed(store.engine)}
    finally:
        store.close()
    assert reasons[ids[0]] == "webhook answered 400: a\\u0000b"
    assert reasons[ids[1]] == "bad \\udcff byte"
    assert len(reasons[ids[2]]) <= MAX_TEXT_CHARS and reasons[ids[2]].endswith(" characters]")
