"""Tracing on a real broker and database (issue 31): the spans a watched record makes,
the context stored with its event, the dead letter's and the replay's headers, and
what each destination sends on.

Spans are taken by the SDK's in-memory exporter installed as the process's tracer (the
end-to-end test against a real collector is tests/airflow/test_tracing_e2e.py); the
records, the dead letters, the rows and the requests are the real ones.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from uow_windows import WindowDriver, coordinates

from kafka_writes import ordered_producer
from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    MessageBatch,
    TriggerEvent,
    reject_shared_stream_event,
    tracing,
)
from sharedstream.core.message import Coordinates
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.delivery.kafka_topic import KafkaTopicSender
from sharedstream.delivery.settings import KafkaDestination, WebhookDestination
from sharedstream.delivery.webhook import WebhookSender
from sharedstream.kafka import dlq_headers
from sharedstream.statestore import StateStore
from sharedstream.statestore.events import EventRecord, events_after, insert_events
from sharedstream.statestore.models import asset_event
from sharedstream.tracing import context as tracecontext
from sharedstream.triggerer import Config, DatabaseSettings, ProcessSettings, Triggerer
from sharedstream.uow.sink import DatabaseWorkSink

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PRODUCER_SPAN}-01"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on, every span sampled, each kept in memory as it ends."""
    finished = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(finished))
    monkeypatch.setattr(tracing, "tracer", provider.get_tracer("tests"))
    yield finished
    provider.shutdown()


def hex_ids(span: ReadableSpan) -> tuple[str, str, str | None]:
    """(trace id, span id, parent span id or None) as hex, as traceparent writes them."""
    context = span.get_span_context()
    parent = span.parent
    return (format(context.trace_id, "032x"), format(context.span_id, "016x"),
            None if parent is None else format(parent.span_id, "016x"))


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    return (f"00-{context.trace_id:032x}-{context.span_id:016x}-"
            f"{int(context.trace_flags):02x}")


def read_records(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tracing-probe"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(found) < count:
            assert time.monotonic() < deadline, f"{len(found)} of {count} records in {topic}"
            found += [m for m in consumer.consume(10, 0.5) if m.error() is None]
    finally:
        consumer.close()
    return found


class RejectsBad(KafkaSharedStreamTrigger):
    """Keeps every record but ``bad``, which it rejects on its first read only."""

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            if message.value == b"bad" and not message.replay_count:
                reject_shared_stream_event("bad record")
                continue
            yield TriggerEvent({"offset": message.offset, "value": message.text})


async def wait_for(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + 30
    while not (found := await asyncio.to_thread(condition)):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return found


def stored(url: str) -> dict[int, str | None]:
    """offset -> trace_context of every stored event."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            e = asset_event.c
            return dict(connection.execute(sa.select(e.offset, e.trace_context)).all())
    finally:
        engine.dispose()


async def test_a_record_is_traced_from_its_traceparent_through_commit_dead_letter_and_replay(
        spans: InMemorySpanExporter, tmp_path: Path, kafka_bootstrap: str,
        create_topic: Callable[..., str]) -> None:
    topic, dlq = create_topic("traced"), create_topic("traced-dlq")
    url = f"sqlite:///{tmp_path / 'events.db'}"
    producer = ordered_producer(kafka_bootstrap)
    other_trace = "0af7651916cd43dd8448eb211c80319c"
    records = [(b"good", TRACEPARENT), (b"malformed", "00-zz-not-a-traceparent"),
               (b"bad", f"00-{other_trace}-b7ad6b7169203331-01")]
    for value, parent in records:
        producer.produce(topic, value, headers=[("traceparent", parent.encode())])
    assert producer.flush(30) == 0
    connection = {"bootstrap.servers": kafka_bootstrap, "group.id": f"tracing-{topic}"}
    config = Config(database=DatabaseSettings(url=url),
                    process=ProcessSettings(health_port=-1, shutdown_timeout=30.0),
                    connections={"k": connection})
    assets = [Asset("traced", watchers=[AssetWatcher("keeper", RejectsBad(
        topics=[topic], kafka_config_id="k", dlq_topic=dlq))])]
    async with Triggerer(config, assets=assets):
        await wait_for(lambda: len(stored(url)) == 2, "two events")
        [dead] = await asyncio.to_thread(read_records, kafka_bootstrap, dlq, 1)
        # dlq replay republishes the dead letter with replay_headers, onto the replay topic.
        producer.produce(dlq_headers.replay_topic_name(dlq), dead.value(),
                         headers=dlq_headers.replay_headers(dead.headers()))
        assert producer.flush(30) == 0
        await wait_for(lambda: len(stored(url)) == 3, "the replay's event")

    by_offset: dict[int, ReadableSpan] = {}
    replayed: ReadableSpan | None = None
    for span in spans.get_finished_spans():
        if span.name == "sharedstream.watch":
            assert span.attributes is not None
            if span.attributes["sharedstream.replay_count"]:
                replayed = span
            else:
                by_offset[int(str(span.attributes["messaging.kafka.offset"]))] = span
    # The valid traceparent: the watch span is its child, in its trace.
    good = by_offset[0]
    assert hex_ids(good)[0] == TRACE and hex_ids(good)[2] == PRODUCER_SPAN
    # The malformed one is ignored, not rejected: a root span, and the event is stored.
    malformed = by_offset[1]
    assert hex_ids(malformed)[2] is None and hex_ids(malformed)[0] != TRACE
    # Each stored event names its watch span; its commit is the watch span's child.
    contexts = stored(url)
    for offset in (0, 1):
        span_id = hex_ids(by_offset[offset])[1]
        assert contexts[offset] == traceparent_of(by_offset[offset])
        [commit] = [s for s in spans.get_finished_spans() if s.name == "sharedstream.uow.commit"
                    and hex_ids(s)[2] == span_id]
        assert commit.attributes is not None and commit.attributes["db.system.name"] == "sqlite"
    # The rejected record: its watch span under its producer's span, and the dead-letter
    # span under that, named in the dead letter's header beside the producer's own
    # traceparent.
    rejected = by_offset[2]
    assert hex_ids(rejected)[::2] == (other_trace, "b7ad6b7169203331")
    [dead_span] = [s for s in spans.get_finished_spans() if s.name == "sharedstream.dead_letter"]
    assert hex_ids(dead_span)[0] == other_trace
    assert hex_ids(dead_span)[2] == hex_ids(rejected)[1]
    headers = dict(dead.headers())
    assert headers["traceparent"] == records[2][1].encode()
    assert headers[dlq_headers.TRACEPARENT] == traceparent_of(dead_span).encode()
    # The replay: again a child of the producer's span, linked to the dead-letter span.
    assert replayed is not None and hex_ids(replayed)[2] == "b7ad6b7169203331"
    assert [format(link.context.span_id, "016x") for link in replayed.links] == [
        hex_ids(dead_span)[1]]
    assert contexts[2] == traceparent_of(replayed)


def outcome_of(message: KafkaMessage) -> str:
    """What the watchers of the outcome test do with a record, by its value."""
    if message.value == b"flaky" and message.delivery == 1:
        raise RuntimeError("flaky on its first delivery")
    return {b"skip": "filter", b"bad": "reject"}.get(message.value or b"", "keep")


class EachOutcome(KafkaSharedStreamTrigger):
    """A per-message watcher: keeps, filters out, rejects or fails a record (outcome_of)."""

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            verdict = outcome_of(message)
            if verdict == "reject":
                reject_shared_stream_event("bad record")
            elif verdict == "keep":
                yield TriggerEvent(message.offset)


class BatchedOutcome(KafkaSharedStreamTrigger):
    """The same verdicts from a batch watcher."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        message: KafkaMessage
        for message in batch:
            verdict = outcome_of(message)
            if verdict == "reject":
                batch.reject(message, "bad record")
            elif verdict == "keep":
                batch.emit(message, TriggerEvent(message.offset))


async def test_every_outcome_of_a_sampled_record_has_a_watch_span_per_watcher(
        spans: InMemorySpanExporter, tmp_path: Path, kafka_bootstrap: str,
        create_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Record i's producer span is 000000000000000i (flag 01, sampled), but for the last
    # two: a filtered record without a traceparent, and one its producer did not sample.
    topic, dlq = create_topic("outcomes"), create_topic("outcomes-dlq")
    values = [b"keep", b"skip", b"bad", b"flaky", b"skip", b"skip"]
    producer = ordered_producer(kafka_bootstrap)
    for offset, value in enumerate(values):
        flags = {4: None, 5: "00"}.get(offset, "01")
        headers: list[tuple[str, str | bytes | None]] = [] if flags is None else [
            ("traceparent", f"00-{TRACE}-{offset + 1:016x}-{flags}".encode())]
        producer.produce(topic, value, headers=headers)
    assert producer.flush(30) == 0
    parsed: list[object] = []  # each parse of a record's trace context headers
    carrier = tracing.header_carrier

    def counted(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, str]:
        parsed.append(headers)
        return carrier(headers)

    monkeypatch.setattr(tracing, "header_carrier", counted)
    url = f"sqlite:///{tmp_path / 'events.db'}"
    connection = {"bootstrap.servers": kafka_bootstrap, "group.id": f"tracing-{topic}"}
    config = Config(database=DatabaseSettings(url=url),
                    process=ProcessSettings(health_port=-1, shutdown_timeout=30.0),
                    manager=ManagerSettings(retry_backoff_initial=0.05, retry_backoff_max=0.2),
                    connections={"k": connection})
    assets = [Asset("outcomes", watchers=[
        AssetWatcher(name, trigger(topics=[topic], kafka_config_id="k", dlq_topic=dlq))
        for name, trigger in (("each", EachOutcome), ("batched", BatchedOutcome))])]
    async with Triggerer(config, assets=assets):
        await wait_for(lambda: sorted(stored_events(url)) == [
            ("batched", 0), ("batched", 3), ("each", 0), ("each", 3)], "four events")
        [dead] = await asyncio.to_thread(read_records, kafka_bootstrap, dlq, 1)

    outcomes: dict[tuple[str, int], list[str]] = {}
    watch_spans: dict[tuple[str, int, str], ReadableSpan] = {}
    for span in spans.get_finished_spans():
        if span.name != "sharedstream.watch":
            continue
        assert span.attributes is not None
        watcher = str(span.attributes["sharedstream.watcher"])
        offset = int(str(span.attributes["messaging.kafka.offset"]))
        outcome = str(span.attributes["sharedstream.outcome"])
        outcomes.setdefault((watcher, offset), []).append(outcome)
        watch_spans[watcher, offset, outcome] = span
        # The child of its record's producer span, as the messaging conventions ask.
        assert hex_ids(span)[::2] == (TRACE, f"{offset + 1:016x}")
        assert span.attributes["messaging.destination.name"] == topic
    # Offsets 4 and 5 are filtered out too, but their producer sampled neither: no span.
    for watcher in ("each", "batched"):
        assert {offset: found for (w, offset), found in outcomes.items() if w == watcher} == {
            0: ["event"], 1: ["filtered"], 2: ["rejected"], 3: ["failed", "event"]}, watcher
        failed = watch_spans[watcher, 3, "failed"]
        assert failed.status.description is not None
        assert "flaky on its first delivery" in failed.status.description
        assert watch_spans[watcher, 2, "rejected"].status.description == "bad record"
    # One dead letter for both rejections: the child of the first rejecting watcher's watch
    # span, linked to the other's, and named in the dead letter's header.
    [dead_span] = [s for s in spans.get_finished_spans() if s.name == "sharedstream.dead_letter"]
    assert hex_ids(dead_span)[2] == hex_ids(watch_spans["batched", 2, "rejected"])[1]
    assert [format(link.context.span_id, "016x") for link in dead_span.links] == [
        hex_ids(watch_spans["each", 2, "rejected"])[1]]
    assert dict(dead.headers())[dlq_headers.TRACEPARENT] == traceparent_of(dead_span).encode()
    # The trace context headers are read once per record, whatever the watchers and rounds.
    assert len(parsed) == len(values) - 1


def stored_events(url: str) -> list[tuple[str, int]]:
    """(watcher, offset) of every stored event."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            e = asset_event.c
            return [tuple(row) for row in connection.execute(sa.select(e.watcher, e.offset))]
    finally:
        engine.dispose()


def test_the_trace_context_column_round_trips(db_url: str) -> None:
    store = StateStore.from_url(db_url)
    store.upgrade()
    try:
        asset_id = store.register_asset("a", None)
        state = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
        context = f"{TRACEPARENT}\n{state}"
        now = datetime.now(UTC)
        rows = [{"asset_id": asset_id, "watcher": "w", "payload": "1", "topic": "t",
                 "topic_id": "id", "partition": 0, "offset": offset, "event_index": 0,
                 "created_at": now, "trace_context": text}
                for offset, text in enumerate([context, None])]
        with store.engine.begin() as connection:
            assert insert_events(connection, rows) == 2
        with store.engine.connect() as connection:
            found = events_after(connection, 0, limit=10)
        assert [e.trace_context for e in found] == [context, None]
        assert tracecontext.parse_stored(context) == {"traceparent": TRACEPARENT,
                                                      "tracestate": state}
    finally:
        store.close()


async def test_a_window_tracing_cannot_read_still_commits_without_a_context(
        spans: InMemorySpanExporter, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The unit of work takes any payload with a coordinates function; these are tuples,
    # which the watch span cannot read: the window must commit all the same.
    monkeypatch.setattr(tracing, "_unreadable_logged", False)  # logged once per process
    store = StateStore.from_url(f"sqlite:///{tmp_path / 'uow.db'}")
    store.upgrade()
    sink = DatabaseWorkSink(store, {"w": store.register_asset("a", None)},
                            ProcessSettings(uow_max_delay=0.0), coordinates=coordinates)
    driver = WindowDriver("w", sink)
    try:
        driver.handle(("t", 0, 5), {"n": 1})
        await wait_for(lambda: driver.confirmed == [("t", 0, 5)], "the window's commit")
        assert stored(str(store.engine.url)) == {5: None}
        assert "tracing: no watch span for watcher 'w'" in caplog.text
        assert spans.get_finished_spans() == ()
    finally:
        await sink.aclose()
        store.close()


def traced_event(event_id: int) -> EventRecord:
    return EventRecord(event_id, "orders", None, "w", Coordinates("t", "id", 0, event_id), 0,
                       datetime.now(UTC), {"n": event_id}, TRACEPARENT)


def delivered_under_the_event(span: ReadableSpan, carried: str, kind: str) -> None:
    """The deliver span is the child of the stored context, and what the destination got
    names that deliver span."""
    trace_id, _, parent = hex_ids(span)
    assert (trace_id, parent) == (TRACE, PRODUCER_SPAN)
    assert carried == traceparent_of(span)
    assert span.attributes is not None
    assert span.attributes["sharedstream.destination.kind"] == kind
    assert span.attributes["sharedstream.delivered"] is True


async def test_the_kafka_destination_writes_the_delivery_spans_traceparent(
        spans: InMemorySpanExporter, kafka_bootstrap: str,
        create_topic: Callable[..., str]) -> None:
    topic = create_topic("traced-out")
    sender = KafkaTopicSender(KafkaDestination(topic=topic), {"bootstrap.servers": kafka_bootstrap})
    try:
        assert await sender.send([traced_event(7)], maybe_sent=False) == [None]
    finally:
        await sender.aclose()
    [record] = read_records(kafka_bootstrap, topic, 1)
    [span] = spans.get_finished_spans()
    delivered_under_the_event(span, dict(record.headers())["traceparent"].decode(), "kafka")


class Recorded(BaseHTTPRequestHandler):
    headers_seen: list[dict[str, str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Recorded.headers_seen.append(dict(self.headers))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_the_webhook_sends_the_delivery_spans_traceparent(
        spans: InMemorySpanExporter) -> None:
    server = HTTPServer(("127.0.0.1", 0), Recorded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Recorded.headers_seen = []
    sender = WebhookSender(WebhookDestination(
        url=f"http://127.0.0.1:{server.server_port}/hook", secret="s"))
    try:
        assert await sender.send([traced_event(8)], maybe_sent=False) == [None]
    finally:
        await sender.aclose()
        server.shutdown()
        server.server_close()
    [headers] = Recorded.headers_seen
    [span] = spans.get_finished_spans()
    delivered_under_the_event(span, headers["traceparent"], "webhook")
    assert headers["X-Sharedstream-Event-Id"] == "8"
