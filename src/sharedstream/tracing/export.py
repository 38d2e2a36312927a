"""Which exporter the ``OTEL_*`` environment asks for, and the tracer provider for it.

One exporter: OTLP over HTTP (the ``tracing`` extra's) or the console, each behind the
SDK's batch processor, which exports on its own thread so that a slow or absent
collector costs spans, never a message. What sharedstream cannot honour (another
exporter, a list of them, an OTLP protocol but ``http/protobuf``) is a
:class:`TracingConfigError`, refused at start-up rather than traced nowhere. The SDK
reads its other settings (endpoint, headers, sampler, queue) from ``os.environ``.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.util import find_spec
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

EXPORTERS = ("otlp", "console")
SERVICE_NAME = "sharedstream"


class TracingConfigError(ValueError):
    """``OTEL_*`` settings sharedstream cannot honour; the text says which and what to do."""


def wanted_exporter(environ: Mapping[str, str]) -> str | None:
    """The exporter ``OTEL_TRACES_EXPORTER`` asks for, or None for off.

    One exporter only: a list (``otlp,console``) is refused, as is any exporter but
    OTLP over HTTP and the console (which prints spans to standard output, for a look).
    """
    value = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if value in ("", "none"):
        return None
    if value not in EXPORTERS:
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={value!r}: sharedstream exports traces with otlp "
            "(OTLP over HTTP) or console; set one of them, or none to turn tracing off")
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                           environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"))
    if value == "otlp" and protocol.strip().lower() != "http/protobuf":
        raise TracingConfigError(
            f"OTLP protocol {protocol!r}: sharedstream sends OTLP over HTTP only; set "
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (the collector's port 4318)")
    return value


OTLP_MODULE = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def _importable(module: str) -> bool:
    """Whether ``module`` is installed, without importing it (only its parent packages)."""
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def extra_installed() -> bool:
    """Whether the ``tracing`` extra (the SDK and its OTLP exporter) is installed."""
    return all(map(_importable, ("opentelemetry.sdk.trace", OTLP_MODULE)))


def new_provider(exporter_name: str) -> TracerProvider:
    """A tracer provider exporting to ``exporter_name`` (one of :data:`EXPORTERS`), its
    service ``sharedstream`` unless the environment names one. Needs the extra."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    if exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # = OTLP_MODULE
            OTLPSpanExporter,
        )

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider
