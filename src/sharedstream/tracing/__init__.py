"""OpenTelemetry traces, off unless asked for: one switch, read once at start-up.

:func:`configure` turns tracing on when the ``tracing`` extra is installed and
``OTEL_TRACES_EXPORTER`` names an exporter (``otlp`` or ``console``; ``none`` or unset:
off). Off, :data:`tracer` stays None, nothing of OpenTelemetry is imported, and every
call site is one ``tracing.tracer is not None`` test. On, the SDK's own ``OTEL_*``
variables apply: the OTLP/HTTP endpoint and headers, the sampler
(``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``), the batch processor's queue,
``OTEL_SERVICE_NAME`` (``sharedstream`` when no service name is set).

This module holds the switch and the spans of a message on its way in (watch,
commit, dead letter). Which settings are honoured, and the provider they build, are
:mod:`~sharedstream.tracing.export`'s; the W3C carriers (headers, the stored
context) :mod:`~sharedstream.tracing.context`'s; the deliver span
:mod:`~sharedstream.tracing.deliveryspans`'s, which reads :data:`tracer` from here.

Spans (docs/tracing.md has the table): ``sharedstream.watch`` for each outcome of one
watcher on one message (``sharedstream.outcome``: ``event``, ``filtered``, ``rejected``,
``failed``), a child of the record's W3C ``traceparent`` header when it has a valid one
(a malformed header is ignored, never a rejection); its child
``sharedstream.uow.commit`` for the transaction that stored the watcher's window;
``sharedstream.dead_letter`` for each dead-letter record, a child of the rejecting
watcher's watch span; ``sharedstream.deliver`` for each event a destination is sent, a
child of the watch span's context persisted with the event
(``asset_event.trace_context``), since delivery runs later and often in another process.

Which outcomes have a span: a window the unit of work takes (events or state), a
rejection and a failure always (the sampler decides, as for any span); a message
filtered out only when its producer sampled the record (``traceparent`` flag 01) or it
is a replayed dead letter. Filtering out is what most watchers do with most messages:
a span each, for records nobody asked to follow, would cost a sampler decision per
message per watcher, and without a producer's trace to join, each would be a trace of
its own. The group reports each outcome (:func:`acked`, :func:`rejected`,
:func:`failed`); the record's headers are read once per message, on its first outcome,
and kept on the message for its other watchers (:class:`_Trace`).

Failure windows: spans are exported by the SDK's batch processor on its own thread.
A collector that is down or slow costs spans (dropped when the queue is full, or
when an export times out), never a message, a commit or a delivery: nothing here
waits on the exporter except :func:`shutdown`, which waits at most the time given.
Spans still queued when that time is up are lost.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sharedstream.tracing.context import (
    DEAD_LETTER_TRACEPARENT,
    TRACEPARENT,
    carrier_of,
    context_of,
    header_carrier,
    otel_api,
    stored_context,
)
from sharedstream.tracing.export import (
    TracingConfigError,
    extra_installed,
    new_provider,
    wanted_exporter,
)
from sharedstream.tracing.otelenv import check_environment, hidden

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Link, Span, SpanContext, Tracer

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Record(Protocol):
    """What tracing reads of a Kafka record (the core's ``KafkaMessage`` is one). A
    protocol of its own keeps this room below the core: the core reports outcomes here,
    and nothing here imports the core back."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def replay_count(self) -> int: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...

    def derived(self, key: Hashable, make: Callable[[Any], _T]) -> _T:
        """``make(self)``, computed once per record and kept on it."""

tracer: Tracer | None = None
"""The tracer while tracing is on; None (the default) means off."""

_provider: TracerProvider | None = None

_unreadable_logged = False


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on if the environment asks for it and the extra is installed.

    Call once per process, before its first message. True when tracing is on. Asked
    for without the extra, tracing stays off with a warning: the same environment
    (a cluster-wide ``OTEL_*`` setting) may reach images built without it.
    TracingConfigError for settings that cannot work. ``environ`` decides the switch;
    the SDK reads its own settings from ``os.environ``.
    """
    global tracer, _provider
    if tracer is not None:
        return True
    exporter_name = checked_exporter(environ)
    if exporter_name is None:
        return False
    try:
        provider = new_provider(exporter_name)
    except (ValueError, TypeError) as exc:  # a setting otelenv does not know of
        raise TracingConfigError(f"OpenTelemetry refused the OTEL_* settings: "
                                 f"{hidden(str(exc), environ)}") from None
    _provider = provider
    tracer = provider.get_tracer("sharedstream")
    log.info("tracing on: exporter %s, service %s, sampler %s", exporter_name,
             provider.resource.attributes.get("service.name"),
             provider.sampler.get_description())
    return True


def checked_exporter(environ: Mapping[str, str] = os.environ) -> str | None:
    """The exporter tracing will use, every ``OTEL_*`` setting it reads checked first
    (:mod:`~sharedstream.tracing.otelenv`; TracingConfigError), or None when tracing stays
    off. ``check`` calls it too, so a bad setting fails there as it would in ``run``."""
    exporter_name = wanted_exporter(environ)
    if exporter_name is None:
        return None
    if not extra_installed():
        log.warning("OTEL_TRACES_EXPORTER=%s but the tracing extra is not installed "
                    "(pip install 'sharedstream[tracing]'): tracing is off", exporter_name)
        return None
    check_environment(environ, exporter_name)
    return exporter_name


def shutdown(timeout: float) -> None:
    """Export what is queued, waiting at most ``timeout`` seconds, then turn tracing off.

    The SDK's own shutdown may wait for a slow collector far longer (its export
    timeout, then 30 s), so it runs on a daemon thread that is left behind when the
    time is up: its spans are lost, the process exits on time.
    """
    global tracer, _provider
    provider, _provider, tracer = _provider, None, None
    if provider is None:
        return
    export = threading.Thread(target=provider.shutdown, name="tracing-shutdown", daemon=True)
    export.start()
    export.join(timeout)
    if export.is_alive():
        log.warning("tracing: spans not exported within %.1fs at shutdown were dropped",
                    timeout)


# -- spans --------------------------------------------------------------------------------------


class _Trace:
    """What tracing derives from one record, once for all its watchers (kept on the
    message with :meth:`Record.derived`), and its watchers' spans in flight.

    ``parent``: the context of the record's valid ``traceparent``, else None. ``follow``:
    its producer sampled it (flag 01), or it is a replayed dead letter: its filtered-out
    outcomes get spans too. ``links``: a replay's link to the span that dead-lettered it.
    ``open``: watcher -> its watch span waiting in the unit of work. ``rejected``:
    watcher -> its rejected watch span, for the dead letter to be the child of.
    """

    __slots__ = ("follow", "links", "open", "parent", "rejected")

    def __init__(self, message: Record) -> None:
        api = otel_api()
        headers = message.headers
        self.parent: Any = context_of(header_carrier(headers)) if headers else None
        self.follow = message.replay_count > 0 or (
            self.parent is not None
            and api.trace.get_current_span(self.parent).get_span_context().trace_flags.sampled)
        self.links: list[Link] = []
        if message.replay_count:
            for name, value in headers:
                if name == DEAD_LETTER_TRACEPARENT and value is not None:
                    linked = api.trace.get_current_span(context_of(
                        {TRACEPARENT: value.decode("utf-8", "replace")})).get_span_context()
                    if linked.is_valid:
                        self.links.append(api.trace.Link(linked, {"sharedstream.link":
                                                                  "dead_letter"}))
        self.open: dict[str, Span] | None = None
        self.rejected: dict[str, SpanContext] | None = None


def _trace_of(payload: Any) -> _Trace | None:
    """The trace of a Kafka adapter's payload (its record's); None for any other payload
    (one without a record that keeps what is derived from it)."""
    derived = getattr(getattr(payload, "message", None), "derived", None)
    # The class is its own key in the record's cache.
    return derived(_Trace, _Trace) if derived is not None else None


def _start(trace: _Trace, watcher: str, message: Record) -> Span:
    """A ``sharedstream.watch`` span of ``watcher`` on ``message``. Its attributes are set
    only on a span the sampler records (most are not, at a low ratio), so the sampler
    decides without them."""
    assert tracer is not None
    span = tracer.start_span("sharedstream.watch", trace.parent,
                             otel_api().trace.SpanKind.CONSUMER, links=trace.links)
    if span.is_recording():
        span.set_attributes({
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": message.topic,
            "messaging.destination.partition.id": str(message.partition),
            "messaging.kafka.offset": message.offset,
            "sharedstream.watcher": watcher,
            "sharedstream.replay_count": message.replay_count,
        })
    return span


def _end(span: Span, outcome: str, reason: str | None = None) -> None:
    """End a watch span with its outcome (and ``reason`` as an error status). A span
    already ended (by whichever of the group and the unit of work saw the outcome first)
    is left as it is."""
    if span.is_recording():
        span.set_attribute("sharedstream.outcome", outcome)
        if reason is not None:
            api = otel_api()
            span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, reason[:1000]))
        span.end()


def start_watch(watcher: str, payload: Any) -> Span:
    """Start the ``sharedstream.watch`` span of ``watcher``'s window on a message, which
    the unit of work ends at its commit.

    ``payload`` is the adapter's view of the record (``KafkaPayload``): its headers'
    ``traceparent`` makes the span a child of the producer's span; a replayed dead
    letter's ``sharedstream.traceparent`` adds a link to the span that dead-lettered it.
    Both are read once per message (:class:`_Trace`).
    """
    message = payload.message
    trace: _Trace = message.derived(_Trace, _Trace)
    span = _start(trace, watcher, message)
    if trace.open is None:
        trace.open = {}
    trace.open[watcher] = span
    return span


# -- the group's outcomes: one call each, only while tracing is on ------------------------------


def acked(payload: Any, watcher: str) -> None:
    """``watcher`` acked the message. After its unit of work's commit, the unit of work
    ends the span (after its commit span); otherwise the watcher filtered the message
    out, which has a span when its record is followed (``_Trace.follow``)."""
    trace = _trace_of(payload)
    if trace is None:
        return
    opened = trace.open
    if opened is not None and opened.pop(watcher, None) is not None:
        return
    if trace.follow:
        _end(_start(trace, watcher, payload.message), "filtered")


def _taken(trace: _Trace, watcher: str, message: Record) -> Span:
    """``watcher``'s watch span on ``message`` for an outcome the unit of work did not
    end: the one it opened (taken out of ``trace.open``), else a new one."""
    opened = trace.open
    span = opened.pop(watcher, None) if opened is not None else None
    return span if span is not None else _start(trace, watcher, message)


def rejected(payload: Any, watcher: str, reason: str) -> None:
    """``watcher`` rejected the message: its watch span ends rejected (the one in the unit
    of work, when the sink refused its window) and is kept for the dead letter."""
    trace = _trace_of(payload)
    if trace is None:
        return
    span = _taken(trace, watcher, payload.message)
    _end(span, "rejected", reason)
    if trace.rejected is None:
        trace.rejected = {}
    trace.rejected[watcher] = span.get_span_context()


def failed(payload: Any, watcher: str, why: str) -> None:
    """``watcher`` failed on the message (it raised, timed out, its unit of work failed,
    or it left): a watch span that ends failed; the message is held and handed out again."""
    trace = _trace_of(payload)
    if trace is None:
        return
    _end(_taken(trace, watcher, payload.message), "failed", why)


# A window's watch spans: one per message whose events it holds, with how many.
Watches = list[tuple["Span", int]]


def start_watches(window: Any) -> Watches:
    """The watch spans of a window the unit of work takes: one for a per-message window;
    for a batch call's window (its ``parts``), one per message with events.

    A payload it cannot read (not the Kafka adapter's) gets no span and an error logged
    once per process: tracing never stands between a window and its commit.
    """
    try:
        parts = getattr(window, "parts", None)
        if parts is None:
            return [(start_watch(window.watcher, window.payload), len(window.events))]
        return [(start_watch(window.watcher, payload), count) for payload, count in parts]
    except Exception:
        global _unreadable_logged
        if not _unreadable_logged:  # once: the same bug would otherwise log every message
            _unreadable_logged = True
            log.exception("tracing: no watch span for watcher %r's window (logged once)",
                          window.watcher)
        return []


def stored_contexts(watches: Watches, events: int) -> list[str | None]:
    """The ``trace_context`` of each of a window's ``events`` events, in event order
    (exactly ``events`` of them: tracing never fails a commit, even on a miscount)."""
    found: list[str | None] = []
    for span, count in watches:
        found += [stored_context(span)] * count
    return (found + [None] * events)[:events]


def end_watches(watches: Watches, outcome: str, reason: str | None = None) -> None:
    """End a window's watch spans not ended yet: ``rejected``, with the reason (an error)."""
    for span, _ in watches:
        _end(span, outcome, reason)


def committed(windows: Sequence[Watches], started_ns: int, *, events: int,
              dialect: str) -> None:
    """One transaction stored these windows: a ``sharedstream.uow.commit`` child of each
    of their watch spans (the same times, the batch's figures), then the watch spans end.
    """
    assert tracer is not None
    set_span_in_context = otel_api().trace.set_span_in_context
    ended_ns = time.time_ns()
    attributes: dict[str, str | int] = {
        "db.system.name": dialect, "sharedstream.uow.windows": len(windows),
        "sharedstream.uow.events": events}
    for watches in windows:
        for span, count in watches:
            if span.is_recording():
                tracer.start_span("sharedstream.uow.commit", set_span_in_context(span),
                                  attributes=attributes, start_time=started_ns).end(ended_ns)
            _end(span, "event" if count else "filtered")  # state only: no event of it


def dead_letter(original_headers: Sequence[tuple[str, bytes | None]], *, source_topic: str,
                consumer_group: str, rejections: Mapping[str, str],
                message: Record | None = None) -> str | None:
    """Record a ``sharedstream.dead_letter`` span for a record of ``source_topic`` that
    ``consumer_group``'s watchers rejected; the ``traceparent`` naming it (for the dead
    letter's ``sharedstream.traceparent`` header), or None when it is not recorded.

    A child of the first rejecting watcher's watch span (by name), linked to the other
    rejecting watchers' ones; without them (``message`` not given, or a rejection no
    watcher made: a replay for a watcher that is gone), of the record's own
    ``traceparent``. It marks the moment the record is handed to the producer; the
    broker's acknowledgement is not part of it.
    """
    api = otel_api()
    assert tracer is not None
    trace = None if message is None else message.derived(_Trace, _Trace)
    watched = [] if trace is None or trace.rejected is None else [
        trace.rejected[w] for w in sorted(rejections) if w in trace.rejected]
    if watched:
        parent = api.trace.set_span_in_context(api.trace.NonRecordingSpan(watched[0]))
    elif trace is not None:
        parent = trace.parent
    else:
        parent = context_of(header_carrier(original_headers)) if original_headers else None
    reasons = "; ".join(f"{w}: {r}" for w, r in sorted(rejections.items()))
    span = tracer.start_span("sharedstream.dead_letter", parent, api.trace.SpanKind.PRODUCER,
                             attributes={"messaging.system": "kafka",
                                         "messaging.operation.type": "send",
                                         "messaging.consumer.group.name": consumer_group,
                                         "sharedstream.source_topic": source_topic,
                                         "sharedstream.watchers": sorted(rejections)},
                             links=[api.trace.Link(c) for c in watched[1:]])
    named = carrier_of(span)[TRACEPARENT] if span.is_recording() else None
    span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, reasons[:1000]))
    span.end()
    return named
