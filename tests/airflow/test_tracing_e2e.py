"""A Kafka record followed to the Airflow asset event it caused, in one trace (issue 31).

The record is produced with a W3C ``traceparent`` naming a real producer span (sent to
the collector too). A ``sharedstream run`` process, with ``OTEL_*`` pointing at a real
OpenTelemetry Collector (``otlp_collector``, tools/otelcol), watches the topic and
delivers the event to the test Airflow's asset ``orders``. The collector's file must
hold one trace: the producer's span, sharedstream's watch span under it, the unit of
work's commit under that, and the Airflow delivery under the watch span (continued
from the context persisted with the event); Airflow's asset event names that trace
and that delivery span in its ``extra``. Two more records of the same producer span,
a tombstone the watcher filters out and a value it rejects, are in that trace with
their outcomes, the rejected one's dead letter under its watch span.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_server import ORDERS, AirflowServer
from localservices.otelcol import OtlpCollector
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from triggerer import Triggerer, until, write_config

from kafka_writes import ordered_producer

WATCHERS = Path(__file__).resolve().parent / "tracing_watchers.py"


# Kept (an event), filtered out (a tombstone), rejected (not UTF-8): offsets 0, 1, 2.
RECORDS = [json.dumps({"id": 1}).encode(), None, b"\xff"]


def produce_traced(bootstrap: str, topic: str, collector: OtlpCollector) -> tuple[str, str]:
    """Produce RECORDS inside a real producer span; (trace id, span id) of that span."""
    provider = TracerProvider(resource=Resource.create({"service.name": "order-service"}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{collector.endpoint}/v1/traces")))
    producer = ordered_producer(bootstrap)
    with provider.get_tracer("tests.producer").start_as_current_span(
            "orders send", kind=SpanKind.PRODUCER) as span:
        context = span.get_span_context()
        trace_id, span_id = format(context.trace_id, "032x"), format(context.span_id, "016x")
        for value in RECORDS:
            producer.produce(topic, value, headers=[
                ("traceparent", f"00-{trace_id}-{span_id}-01".encode())])
        assert producer.flush(30) == 0
    provider.shutdown()
    return trace_id, span_id


def airflow_event(server: AirflowServer, trace_id: str) -> dict[str, Any] | None:
    for event in server.events(ORDERS[1]):
        extra: Any = event.get("extra") or {}
        if trace_id in str(extra.get("traceparent", "")):
            return event
    return None


def test_one_trace_from_the_kafka_record_to_the_airflow_asset_event(
        airflow_pair: dict[str, AirflowServer], otlp_collector: OtlpCollector,
        tmp_path: Path, pg_url: str, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    server = airflow_pair["a"]
    topic, dlq = create_topic("traced"), create_topic("traced-dlq")
    cfg = write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                       connection=connection, tables={
                           "airflow.a": {"base_url": server.base_url, "username": "admin",
                                         "password": server.password},
                           "destinations.airflow": {"kind": "airflow", "instance": "a",
                                                    "assets": ["orders"], "start": "earliest",
                                                    "retry_initial": 0.2, "retry_max": 1.0}})
    process = triggerers(cfg, watchers=WATCHERS, env={
        "TRACED_TOPIC": topic, "TRACED_DLQ": dlq, "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_collector.endpoint,
        "OTEL_SERVICE_NAME": "sharedstream-e2e", "OTEL_BSP_SCHEDULE_DELAY": "100"}).start()
    trace_id, producer_span = produce_traced(kafka_bootstrap, topic, otlp_collector)

    event = until(lambda: airflow_event(server, trace_id), "the traced event in Airflow", 60,
                  interval=0.5)
    names = {"sharedstream.watch", "sharedstream.uow.commit", "sharedstream.deliver",
             "sharedstream.dead_letter"}
    try:
        spans = until(lambda: (found := otlp_collector.spans(trace_id))
                      and names <= {s.name for s in found}
                      and sum(s.name == "sharedstream.watch" for s in found) == len(RECORDS)
                      and found, "the trace's spans", 30)
    except AssertionError as missing:
        got = sorted(s.name for s in otlp_collector.spans(trace_id))
        raise AssertionError(f"{missing}; the collector has {got}; triggerer log:\n"
                             f"{process.log()[-3000:]}") from None
    watches = {int(s.attributes["messaging.kafka.offset"]): s for s in spans
               if s.name == "sharedstream.watch"}
    by_name = {span.name: span for span in spans if span.name != "sharedstream.watch"}
    assert sorted(by_name) == sorted({"orders send", *names} - {"sharedstream.watch"}), (
        process.log()[-3000:])
    watch = watches[0]
    deliver = by_name["sharedstream.deliver"]
    # The filtered-out and the rejected record: their watch spans, siblings of the kept
    # one's, and the dead letter under the rejecting watch span.
    assert {o: s.attributes["sharedstream.outcome"] for o, s in watches.items()} == {
        0: "event", 1: "filtered", 2: "rejected"}
    assert {s.parent_span_id for s in watches.values()} == {producer_span}
    assert by_name["sharedstream.dead_letter"].parent_span_id == watches[2].span_id
    # One trace: producer -> watch -> (commit, deliver), each the child of the one before.
    assert by_name["orders send"].span_id == producer_span
    assert watch.parent_span_id == producer_span
    assert by_name["sharedstream.uow.commit"].parent_span_id == watch.span_id
    assert deliver.parent_span_id == watch.span_id
    assert watch.kind == "consumer" and deliver.kind == "client"
    assert watch.attributes["messaging.destination.name"] == topic
    assert watch.attributes["sharedstream.watcher"] == "traced_orders"
    assert deliver.attributes["sharedstream.destination.kind"] == "airflow"
    assert deliver.attributes["sharedstream.event.id"] == event["extra"]["sharedstream_event"]["id"]
    assert watch.resource["service.name"] == "sharedstream-e2e"
    # Airflow's asset event names the trace and the delivery span that posted it.
    assert event["extra"]["traceparent"] == f"00-{trace_id}-{deliver.span_id}-01"
    assert json.loads(event["extra"]["payload"]) == {"id": 1}
