"""The tests' OpenTelemetry Collector (tools/otelcol) takes what the Python exporter sends.

A smoke test of the ``otlp_collector`` fixture that the tracing tests stand on: spans
made with the OpenTelemetry SDK, sent by its OTLP/HTTP exporter to the real collector,
come back from the collector's file with their ids, parent, attributes and links intact.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from localservices import ServiceError
from localservices.otelcol import BUILD_SCRIPT, OtlpCollector, collector_binary
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode, TraceFlags


def test_spans_sent_over_otlp_http_come_back_from_the_collectors_file(
        otlp_collector: OtlpCollector) -> None:
    finished = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "otelcol-smoke"}))
    provider.add_span_processor(SimpleSpanProcessor(finished))
    tracer = provider.get_tracer("tests.otelcol")
    producer = SpanContext(trace_id=0x0af7651916cd43dd8448eb211c80319c,
                           span_id=0xb7ad6b7169203331, is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with tracer.start_as_current_span("parent", kind=SpanKind.CONSUMER,
                                      links=[Link(producer, {"origin": "traceparent"})]) as parent:
        parent.set_attributes({"text": "a", "count": 3, "ok": True, "ratio": 0.5,
                               "names": ["x", "y"]})
        with tracer.start_as_current_span("child") as child_span:
            child_span.set_status(StatusCode.ERROR, "failed on purpose")
    provider.shutdown()

    exporter = OTLPSpanExporter(endpoint=f"{otlp_collector.endpoint}/v1/traces")
    # The collector answers only after its file has the spans (no queue, no batching).
    assert exporter.export(finished.get_finished_spans()) is SpanExportResult.SUCCESS
    exporter.shutdown()  # type: ignore[no-untyped-call]

    trace_id = format(parent.get_span_context().trace_id, "032x")
    got = {span.name: span for span in otlp_collector.spans(trace_id)}
    assert sorted(got) == ["child", "parent"]
    root, child = got["parent"], got["child"]
    assert root.parent_span_id == ""
    assert child.parent_span_id == root.span_id == format(parent.get_span_context().span_id, "016x")
    assert (root.kind, root.status, child.kind, child.status) == (
        "consumer", "unset", "internal", "error")
    assert root.attributes == {"text": "a", "count": 3, "ok": True, "ratio": 0.5,
                               "names": ["x", "y"]}
    assert [(link.trace_id, link.span_id, dict(link.attributes)) for link in root.links] == [
        ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", {"origin": "traceparent"})]
    assert root.resource["service.name"] == "otelcol-smoke"
    assert root.scope == "tests.otelcol"


def test_a_failed_collector_build_names_its_cause(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty tools cache and a Go that fails: the build runs, fails, and says so.
    monkeypatch.setenv("SHAREDSTREAM_TOOLS_CACHE", str(tmp_path))
    monkeypatch.setenv("GO", "/bin/false")
    with pytest.raises(ServiceError, match=r"scripts/otelcol failed \(exit 1\)"):
        collector_binary()
    assert not list(tmp_path.glob("otelcol-*")), "a failed build must not be cached"


def test_the_build_script_is_a_quick_no_op_once_built(otlp_collector: OtlpCollector) -> None:
    # The fixture built (or found) the binary; asking again builds nothing.
    again = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=True)
    assert again.stderr == ""
    assert Path(again.stdout.strip()).is_file()
