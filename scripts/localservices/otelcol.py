"""A real OpenTelemetry Collector for tests and the bench: OTLP over HTTP in, a JSON file out.

The binary is the project's own small collector (``tools/otelcol``), built from the
collector's Go modules by ``scripts/otelcol``, once per cache; the build is under a
lock, so a caller that arrives while ``.ci/run``'s background build runs waits for it.

The collector listens on a free loopback port and writes every trace request it decodes
to a JSON-lines file (one OTLP/JSON ``TracesData`` per request), which ``spans()``
parses back. There is no batch processor in the pipeline and the file exporter has no
queue, so the collector answers an export only after its spans are written: once the
exporter's ``force_flush()`` returns true, ``spans()`` holds them, no waiting needed.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._process import ManagedProcess, ServiceError, free_port, wait_until

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "otelcol"


def collector_binary() -> Path:
    """The collector's binary, built first if needed (minutes on a cold Go cache).

    Raises ServiceError with the build's output when it fails, so a broken build names
    its cause in the test report instead of looking like a missing service.
    """
    try:
        built = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True,
                               timeout=1800, check=False)
    except subprocess.TimeoutExpired as error:
        raise ServiceError(f"scripts/otelcol did not finish in {error.timeout:.0f}s") from error
    if built.returncode != 0:
        raise ServiceError(f"scripts/otelcol failed (exit {built.returncode}):\n"
                           f"{built.stderr[-4000:]}")
    return Path(built.stdout.strip())


@dataclass(frozen=True)
class Link:
    """A span's link to another span (e.g. the producer's, from a ``traceparent``)."""

    trace_id: str
    span_id: str
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class Span:
    """One span as the collector decoded it; ids are lower-case hex, as in ``traceparent``."""

    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    kind: str  # "internal", "server", "client", "producer", "consumer"; "" unspecified
    status: str  # "unset", "ok" or "error"
    attributes: Mapping[str, Any]
    links: tuple[Link, ...]
    resource: Mapping[str, Any]  # e.g. {"service.name": ...}
    scope: str  # the instrumentation scope's name


# OTLP/JSON writes enums as their numbers.
_KINDS = ("", "internal", "server", "client", "producer", "consumer")
_STATUSES = ("unset", "ok", "error")


def _value(value: Mapping[str, Any]) -> Any:
    """An OTLP/JSON ``AnyValue`` as Python (int64s come as JSON strings, bytes as base64)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    if "arrayValue" in value:
        return [_value(item) for item in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", []))
    return None


def _attributes(pairs: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {pair["key"]: _value(pair.get("value", {})) for pair in pairs}


def parse_traces(line: str) -> list[Span]:
    """The spans of one line of the file exporter's output (an OTLP/JSON TracesData)."""
    spans: list[Span] = []
    for resource_spans in json.loads(line).get("resourceSpans", []):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
        for scope_spans in resource_spans.get("scopeSpans", []):
            scope = scope_spans.get("scope", {}).get("name", "")
            for span in scope_spans.get("spans", []):
                spans.append(Span(
                    trace_id=span["traceId"], span_id=span["spanId"],
                    parent_span_id=span.get("parentSpanId", ""), name=span["name"],
                    kind=_KINDS[span.get("kind", 0)],
                    status=_STATUSES[span.get("status", {}).get("code", 0)],
                    attributes=_attributes(span.get("attributes", [])),
                    links=tuple(Link(link["traceId"], link["spanId"],
                                     _attributes(link.get("attributes", [])))
                                for link in span.get("links", [])),
                    resource=resource, scope=scope,
                ))
    return spans


def _config(port: int, output: Path) -> dict[str, Any]:
    return {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
        # A rotation setting makes the exporter write each request straight to the file
        # before the collector answers it (without one it buffers and flushes every
        # second), which is what makes spans() exact; 100 GB is never reached.
        "exporters": {"file": {"path": str(output), "rotation": {"max_megabytes": 100_000}}},
        "service": {
            # No metrics endpoint (its default port, 8888, would clash between collectors).
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
        },
    }


class OtlpCollector:
    """One collector process on 127.0.0.1 with its config, log and output under ``workdir``.

    ``endpoint`` is the OTLP/HTTP base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes it
    (traces go to ``endpoint + "/v1/traces"``).
    """

    def __init__(self, workdir: Path, *, owner_pid: int | None = None) -> None:
        self.workdir = workdir
        self.port = 0
        self.output = workdir / "traces.jsonl"
        self.process = ManagedProcess("otelcol", workdir / "otelcol.log",
                                      owner_pid=os.getpid() if owner_pid is None else owner_pid)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60.0) -> None:
        binary = collector_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self.workdir / "config.yaml"  # JSON is YAML: no YAML writer needed
        config.write_text(json.dumps(_config(self.port, self.output), indent=2))
        self.process.spawn([str(binary), "--config", str(config)])
        wait_until(self._listening, timeout=timeout, what="otelcol",
                   alive=self.process.running, log_path=self.process.log_path)

    def _listening(self) -> bool:
        # The receivers start last, after the pipeline is built: a listening port means
        # an export is taken and written.
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def spans(self, trace_id: str | None = None) -> list[Span]:
        """Every span written so far (of one trace when ``trace_id`` is given), in order.

        A last line without its newline is a write under way and is left for the next call.
        """
        if not self.output.exists():
            return []
        text = self.output.read_text()
        complete = text[:text.rfind("\n") + 1]
        spans = [span for line in complete.splitlines() if line for span in parse_traces(line)]
        return [span for span in spans if trace_id is None or span.trace_id == trace_id]

    def stop(self) -> None:
        """SIGTERM: the collector shuts its pipeline down and closes the file."""
        self.process.stop()
