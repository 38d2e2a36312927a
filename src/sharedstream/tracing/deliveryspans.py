"""The ``sharedstream.deliver`` span of each event a destination is sent.

Delivery runs after the event's commit, often in another process, so the span's
parent is the watch span's context stored with the event
(``asset_event.trace_context``), not anything in this process; the destination is
handed the span's own ``traceparent`` to carry on (Airflow's ``extra``, a webhook's
headers, a Kafka record's). Callers test ``tracing.tracer is not None`` first, as for
every span (:mod:`sharedstream.tracing`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sharedstream import tracing
from sharedstream.tracing.context import carrier_of, context_of, parse_stored

if TYPE_CHECKING:
    from opentelemetry.trace import Span


def start_delivery(trace_context: str, kind: str, event_id: int,
                   attributes: Mapping[str, str | int] | None = None) -> Span:
    """Start the ``sharedstream.deliver`` span of one event, a child of the context
    stored with it; end it with :func:`end_delivery` at the destination's answer."""
    from opentelemetry.trace import SpanKind

    tracer = tracing.tracer
    assert tracer is not None
    fields: dict[str, str | int] = {"sharedstream.destination.kind": kind,
                                    "sharedstream.event.id": event_id, **(attributes or {})}
    return tracer.start_span("sharedstream.deliver", context_of(parse_stored(trace_context)),
                             SpanKind.PRODUCER if kind == "kafka" else SpanKind.CLIENT,
                             attributes=fields)


def end_delivery(span: Span, error: BaseException | None) -> None:
    """End a deliver span: delivered, or failed with ``error``'s text."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("sharedstream.delivered", error is None)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, str(error)[:1000]))
    span.end()


@contextmanager
def delivering(trace_context: str, kind: str, event_id: int,
               attributes: Mapping[str, str | int] | None = None) -> Iterator[dict[str, str]]:
    """:func:`start_delivery` around a block that delivers one event; yields the carrier
    (``traceparent``) to send on. An exception leaving the block marks the span failed."""
    span = start_delivery(trace_context, kind, event_id, attributes)
    try:
        yield carrier_of(span)
    except BaseException as exc:
        end_delivery(span, exc)
        raise
    end_delivery(span, None)
