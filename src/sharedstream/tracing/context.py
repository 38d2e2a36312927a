"""W3C trace context: a span named in a Kafka record's headers and in the event row.

A record's ``traceparent`` (and ``tracestate``) header makes its watch spans children
of its producer's span; ``asset_event.trace_context`` keeps the watch span's own, so
that delivery, later and often in another process, continues the trace. A malformed
value names no context and is ignored, never an error: a producer's bad header must
not reject its message.

Nothing of OpenTelemetry is imported until the first call (:func:`otel_api`): these
functions run only while tracing is on (:mod:`sharedstream.tracing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# The dead-letter record's header naming the span that dead-lettered it (the record's
# own ``traceparent`` stays as its producer wrote it).
DEAD_LETTER_TRACEPARENT = "sharedstream.traceparent"


class OtelApi:
    """The OpenTelemetry API the per-message calls use, imported on first use and kept:
    an import statement in each call costs about a microsecond per message."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.propagator = TraceContextTextMapPropagator()


_api: OtelApi | None = None


def otel_api() -> OtelApi:
    """The OpenTelemetry API, imported on the first call and kept."""
    global _api
    if _api is None:
        _api = OtelApi()
    return _api


def header_carrier(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, str]:
    """The W3C trace context headers of a Kafka record, decoded (the last of each name).

    Bytes that are not UTF-8 are replaced, so the propagator sees a malformed value and
    ignores it, as it ignores any header that does not parse.
    """
    found: dict[str, str] = {}
    for name, value in headers:
        if value is not None and name.lower() in (TRACEPARENT, TRACESTATE):
            found[name.lower()] = value.decode("utf-8", "replace")
    return found


def context_of(carrier: Mapping[str, str]) -> Any:
    """The OpenTelemetry context a carrier names; an empty one when it names none."""
    return otel_api().propagator.extract(carrier)


def carrier_of(span: Span) -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) naming ``span``, to send on."""
    api = otel_api()
    carrier: dict[str, str] = {}
    api.propagator.inject(carrier, api.trace.set_span_in_context(span))
    return carrier


def stored_context(span: Span | None) -> str | None:
    """What ``asset_event.trace_context`` keeps of a watch span: its ``traceparent``, and
    its ``tracestate`` on a second line when it has one; None for a span that is not
    recorded (sampled out), whose events are then delivered without a span."""
    if span is None or not span.is_recording():
        return None
    carrier = carrier_of(span)
    if TRACESTATE in carrier:
        return f"{carrier[TRACEPARENT]}\n{carrier[TRACESTATE]}"
    return carrier[TRACEPARENT]


def parse_stored(text: str) -> dict[str, str]:
    """The carrier of an ``asset_event.trace_context`` value."""
    parent, _, state = text.partition("\n")
    return {TRACEPARENT: parent, TRACESTATE: state} if state else {TRACEPARENT: parent}


def trace_id_of(carrier: Mapping[str, str]) -> str | None:
    """The 32-hex trace id of a valid ``traceparent``, or None."""
    api = otel_api()
    span_context = api.trace.get_current_span(context_of(carrier)).get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None
