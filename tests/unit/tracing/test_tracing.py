"""Tracing's switch and its header parsing (issue 31), without services.

* Off (the default, or ``OTEL_TRACES_EXPORTER=none``), a whole run through the engine
  imports nothing of OpenTelemetry, and stores no trace context.
* Settings sharedstream cannot honour are one ``error:`` line; asked for without the
  extra, tracing stays off with a warning.
* A record's ``traceparent`` makes the watch span its child; a malformed one (any of
  the ways below) is ignored: the message is handled as any other, never rejected.

The pipeline is the watcher harness's (the engine on the in-memory broker and SQLite);
spans go to the SDK's in-memory exporter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    MessageBatch,
    TriggerEvent,
    tracing,
)
from sharedstream.cli import cli
from sharedstream.statestore.models import asset_event
from sharedstream.testing import WatcherHarness
from sharedstream.tracing import context as tracecontext

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01".encode()

# Each is ignored: the watch span starts a trace of its own.
MALFORMED: dict[str, list[tuple[str, bytes | None]]] = {
    "garbage": [("traceparent", b"not a traceparent")],
    "empty": [("traceparent", b"")],
    "no value": [("traceparent", None)],
    "not UTF-8": [("traceparent", b"00-\xff\xfe-" + PARENT.encode() + b"-01")],
    "zero trace id": [("traceparent", f"00-{'0' * 32}-{PARENT}-01".encode())],
    "zero span id": [("traceparent", f"00-{TRACE}-{'0' * 16}-01".encode())],
    "version ff": [("traceparent", f"ff-{TRACE}-{PARENT}-01".encode())],
    "short trace id": [("traceparent", f"00-{TRACE[:30]}-{PARENT}-01".encode())],
    "tracestate alone": [("tracestate", b"rojo=00f067aa0ba902b7")],
}

RUN_OFF = textwrap.dedent("""
    import asyncio, sys
    from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
    from sharedstream import tracing
    from sharedstream.testing import WatcherHarness
    import sharedstream.delivery.airflow, sharedstream.delivery.webhook
    import sharedstream.delivery.kafka_topic, sharedstream.ops.run_command

    async def main():
        assert tracing.configure() is False
        trigger = KafkaSharedStreamTrigger(topics=["t"], kafka_config_id="k", dlq_topic="t.dlq")
        async with WatcherHarness([Asset("a", watchers=[AssetWatcher("w", trigger)])]) as h:
            h.send("one", headers=[("traceparent", b"%s")])
            h.send(b"\\xff")  # not UTF-8: rejected by the default filter, dead-lettered
            await h.settle()
            assert [e.offset for e in h.events()] == [0] and len(h.rejections()) == 1
            with h.store.engine.connect() as c:
                print(c.exec_driver_sql("SELECT trace_context FROM asset_event").all())
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
        print("opentelemetry modules:", loaded)

    asyncio.run(main())
""") % VALID.decode()


@pytest.mark.parametrize("exporter", [None, "none", "NONE"])
def test_off_a_run_imports_nothing_of_opentelemetry_and_stores_no_context(
        exporter: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if exporter is not None:
        env["OTEL_TRACES_EXPORTER"] = exporter
    done = subprocess.run([sys.executable, "-c", RUN_OFF], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[(None,)]", "opentelemetry modules: []"]


@pytest.mark.parametrize("missing", ["opentelemetry", "opentelemetry.exporter"])
def test_asked_for_without_the_extra_tracing_stays_off_with_a_warning(missing: str) -> None:
    # The extra "not installed" (or only the API and SDK, which other packages bring):
    # None in sys.modules is how Python marks a module that cannot be imported.
    hidden = textwrap.dedent(f"""
        import logging, sys
        sys.modules["{missing}"] = None
        logging.basicConfig(format="%(levelname)s %(message)s")
        from sharedstream import tracing
        print(tracing.configure({{"OTEL_TRACES_EXPORTER": "otlp"}}), tracing.tracer)
    """)
    done = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False None"
    assert ("WARNING OTEL_TRACES_EXPORTER=otlp but the tracing extra is not installed "
            "(pip install 'sharedstream[tracing]'): tracing is off") in done.stderr


@pytest.mark.parametrize(("environ", "named"), [
    ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER='jaeger'"),
    ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER='otlp,console'"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
     "OTLP protocol 'grpc'"),
])
def test_settings_that_cannot_work_are_one_error_line(tmp_path: Path, environ: dict[str, str],
                                                      named: str) -> None:
    config = tmp_path / "sharedstream.toml"
    config.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "db.sqlite"}"\n')
    result = CliRunner().invoke(cli, ["deliver", "--config", str(config)], env=environ)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {named}") and "Traceback" not in result.output
    assert tracing.tracer is None


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    finished = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(finished))
    monkeypatch.setattr(tracing, "tracer", provider.get_tracer("tests"))
    yield finished
    provider.shutdown()


class Keep(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            yield TriggerEvent(message.offset)


async def test_a_valid_traceparent_is_the_parent_and_a_malformed_one_is_ignored(
        spans: InMemorySpanExporter) -> None:
    trigger = Keep(topics=["t"], kafka_config_id="k", dlq_topic="t.dlq")
    cases = [("valid", [("traceparent", VALID)]),
             ("valid, header name in capitals", [("Traceparent", VALID)]),
             *MALFORMED.items()]
    async with WatcherHarness([Asset("a", watchers=[AssetWatcher("w", trigger)])]) as h:
        for _, headers in cases:
            h.send("x", headers=headers)
        await h.settle()
        # Every message is handled as any other: an event each, nothing rejected.
        assert [e.offset for e in h.events()] == list(range(len(cases)))
        assert h.rejections() == []
        with h.store.engine.connect() as connection:
            stored = dict(connection.execute(
                sa.select(asset_event.c.offset, asset_event.c.trace_context)).all())
    watches = {span.attributes["messaging.kafka.offset"]: span  # type: ignore[index]
               for span in spans.get_finished_spans() if span.name == "sharedstream.watch"}
    for offset, (case, _) in enumerate(cases):
        span = watches[offset]
        context = span.get_span_context()
        trace_id = format(context.trace_id, "032x")
        if case.startswith("valid"):
            assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT
            assert trace_id == TRACE, case
        else:
            assert span.parent is None and trace_id != TRACE, case
        assert stored[offset] == (f"00-{trace_id}-{context.span_id:016x}-"
                                  f"{int(context.trace_flags):02x}"), case


class KeepInBatches(KafkaSharedStreamTrigger):
    """Two events of a record whose value is ``two``, none of ``none``, one of the rest."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        msg: KafkaMessage
        for msg in batch:
            for index in range({b"two": 2, b"none": 0}.get(msg.value or b"", 1)):
                batch.emit(msg, TriggerEvent([msg.offset, index]))


async def test_a_batch_call_has_a_watch_span_per_message(
        spans: InMemorySpanExporter) -> None:
    trigger = KeepInBatches(topics=["t"], kafka_config_id="k")
    async with WatcherHarness([Asset("a", watchers=[AssetWatcher("w", trigger)])]) as h:
        h.send("two", headers=[("traceparent", VALID)])
        h.send("none", headers=[("traceparent", VALID)])
        h.send("one", headers=MALFORMED["garbage"])
        await h.settle()
        with h.store.engine.connect() as connection:
            e = asset_event.c
            stored = connection.execute(sa.select(e.offset, e.event_index, e.trace_context)
                                        .order_by(e.offset, e.event_index)).all()
    outcomes = {span.attributes["messaging.kafka.offset"]:  # type: ignore[index]
                span.attributes["sharedstream.outcome"]  # type: ignore[index]
                for span in spans.get_finished_spans() if span.name == "sharedstream.watch"}
    # The message without events is filtered out: its producer sampled it, so it has a span.
    assert outcomes == {0: "event", 1: "filtered", 2: "event"}
    watches = {span.attributes["messaging.kafka.offset"]: span  # type: ignore[index]
               for span in spans.get_finished_spans() if span.name == "sharedstream.watch"
               and span.attributes["sharedstream.outcome"] == "event"}  # type: ignore[index]
    parent = watches[0].parent
    assert parent is not None and format(parent.span_id, "016x") == PARENT
    assert watches[2].parent is None
    contexts = {offset: f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"
                for offset, span in watches.items() if (c := span.get_span_context())}
    assert [tuple(row) for row in stored] == [(0, 0, contexts[0]), (0, 1, contexts[0]),
                                              (2, 0, contexts[2])]


def test_the_stored_context_keeps_the_tracestate() -> None:
    for carrier in ({"traceparent": VALID.decode()},
                    {"traceparent": VALID.decode(), "tracestate": "rojo=1,congo=2"}):
        text = "\n".join(carrier.values())
        assert tracecontext.parse_stored(text) == carrier
        assert tracecontext.trace_id_of(tracecontext.parse_stored(text)) == TRACE
    assert tracecontext.trace_id_of({"traceparent": "00-zz"}) is None
