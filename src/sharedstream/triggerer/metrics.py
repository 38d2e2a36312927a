"""Prometheus metrics, read from the running parts at scrape time.

Nothing on the hot path calls a metrics library: the manager's groups, the Kafka
producers and the unit-of-work sink keep plain integer counters, and this
collector turns a snapshot of them into metric families when ``/metrics`` is
scraped. Counting a message is one integer addition; a scrape costs nothing
between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from sharedstream.core.backpressure import PauseReason
from sharedstream.core.counters import GroupCounters, counter_help
from sharedstream.delivery.deliverer import DestinationState
from sharedstream.serde.lookups import RegistryFigures
from sharedstream.serde.registries import registry_figures

if TYPE_CHECKING:
    from sharedstream.delivery.service import DeliveryService
    from sharedstream.triggerer.loopwatch import LoopWatchdog
    from sharedstream.triggerer.view import TriggererView
    from sharedstream.uow.sink import DatabaseWorkSink

PREFIX = "sharedstream"
GROUP = ("group",)
PARTITION = ("group", "topic", "partition")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric: its name (without prefix and ``_total``), kind, help, labels."""

    name: str
    kind: Literal["gauge", "counter", "summary"]
    help: str
    labels: tuple[str, ...] = ()

    @property
    def full_name(self) -> str:
        return f"{PREFIX}_{self.name}"

    def family(self) -> GaugeMetricFamily | CounterMetricFamily:
        if self.kind == "gauge":
            return GaugeMetricFamily(self.full_name, self.help, labels=list(self.labels))
        if self.kind == "counter":
            return CounterMetricFamily(self.full_name, self.help, labels=list(self.labels))
        raise TypeError(f"{self.name}: a summary is built with its count and sum")


# Every metric the triggerer exports, declared here once (docs and dashboards read this).
GROUP_POLLING = MetricSpec("group_polling", "gauge",
                           "1 when the group polls with its cohort.", GROUP)
GROUP_PAUSED = MetricSpec("group_paused", "gauge",
                          "1 while fetching is paused (a bound is reached).", GROUP)
IN_FLIGHT = MetricSpec("in_flight_messages", "gauge", "Messages not yet resolved, or held.", GROUP)
QUEUED = MetricSpec("queued_messages", "gauge", "Messages waiting in watchers' queues.", GROUP)
RECEIVED = MetricSpec("messages_received", "counter",
                      "Messages handed to the group's watchers (first deliveries and re-reads).",
                      GROUP)
REDELIVERED = MetricSpec("redeliveries", "counter", "Held messages delivered again.", GROUP)
OUTCOMES = MetricSpec("watcher_outcomes", "counter",
                      "Per-watcher outcomes of messages (acked, failed, rejected): every "
                      "watcher of a group of at most 100, else the 20 that failed and "
                      "rejected most (series bounded at 10,000 watchers).",
                      ("group", "watcher", "outcome"))
GROUP_OUTCOMES = MetricSpec("group_outcomes", "counter",
                            "Outcomes summed over the group's watchers (acked, failed, "
                            "rejected), and messages no watcher's match took (unrouted).",
                            ("group", "outcome"))
WATCHER_LAG = MetricSpec("watcher_lag_messages", "gauge",
                         "Messages queued for a watcher whose full queue holds the group's "
                         "fetching paused now (subscriber_queue_size): its lag, never a "
                         "failure.", ("group", "watcher"))
LAG_PAUSES = MetricSpec("watcher_lag_pauses", "counter",
                        "Times a watcher's queue filled (subscriber_queue_size) while its "
                        "filter was busy, pausing the group's fetching: lag episodes. Every "
                        "watcher that lagged in a group of at most 100, else the 20 that "
                        "lagged most.", ("group", "watcher"))
UNROUTED = "unrouted"
# Per-watcher series: every watcher up to this many in a group, else the top few.
PER_WATCHER_ALL = 100
PER_WATCHER_TOP = 20
BROKER_READY = MetricSpec("broker_ready", "gauge",
                          "1 when the group's broker connection is healthy.", GROUP)
ASSIGNED = MetricSpec("assigned_partitions", "gauge", "Partitions assigned to this process.", GROUP)
HELD = MetricSpec("held_messages", "gauge", "Messages held for redelivery (partition floors).",
                  GROUP)
PARTITION_LAG = MetricSpec("partition_lag", "gauge",
                           "Messages on the broker not yet committed.", PARTITION)
COMMIT_LAG = MetricSpec("partition_commit_lag", "gauge",
                        "Messages handed out but not yet committed (redelivered after a "
                        "crash now).", PARTITION)
PARTITION_PAUSED = MetricSpec("partition_paused", "gauge",
                              "1 while the partition is paused.", PARTITION)
FLOOR_DISTANCE = MetricSpec("partition_floor_distance", "gauge",
                            "Messages read above the partition's floor (its first unresolved "
                            "message): those no watcher handles (resolved, held) bounded by "
                            "max_in_flight, the rest by the group's max_in_flight.", PARTITION)
OPEN_BYTES = MetricSpec("partition_open_bytes", "gauge",
                        "Key and value bytes of the partition's unresolved messages; bounded by "
                        "max_in_flight_bytes.", PARTITION)
AT_BOUND = MetricSpec("partition_at_bound", "gauge",
                      "1 while the partition is paused at max_in_flight messages resolved or held "
                      "above its floor (a held message waits).", PARTITION)
PAUSED_BECAUSE = MetricSpec("partition_paused_reason", "gauge",
                            "1 for the reason a paused partition does not fetch (reason: "
                            + ", ".join(r.value for r in PauseReason) + ").",
                            (*PARTITION, "reason"))
# The broker adapter's counters: named once, by the fields of core.counters.AdapterCounters.
KAFKA_COUNTERS = {name: MetricSpec(name, "counter", text, GROUP)
                  for name, text in counter_help().items()}
DATABASE_HEALTHY = MetricSpec("database_healthy", "gauge",
                              "1 while units of work commit; 0 while the database fails.")
UOW_QUEUED = MetricSpec("uow_queued_windows", "gauge", "Windows waiting for a unit-of-work batch.")
UOW_LATENCY = MetricSpec("uow_batch_latency_seconds", "summary",
                         "Time from a batch's first commit attempt to its commit.")
UOW_BATCHES = MetricSpec("uow_batches", "counter", "Units of work committed.")
EVENTS_PERSISTED = MetricSpec("events_persisted", "counter", "Asset events inserted.")
UOW_CONFIRMED = MetricSpec("uow_windows_confirmed", "counter",
                           "Message windows whose events and state committed.")
UOW_REJECTED = MetricSpec("uow_windows_rejected", "counter",
                          "Message windows refused by the database for good (the watcher's "
                          "rejection).")
UOW_FAILURES = MetricSpec("uow_commit_failures", "counter",
                          "Unit-of-work commits that failed (retried).")
UOW_PERMANENT = MetricSpec("uow_permanent_failures", "counter",
                           "Unit-of-work batches split because the database refused their data.")
HEARTBEAT_FAILURES = MetricSpec("heartbeat_failures", "counter",
                                "Heartbeat writes that failed (tried again every 5 s; the "
                                "process's row goes stale meanwhile).")

DESTINATION = ("destination",)
DELIVERY_HOLDER = MetricSpec("delivery_holder", "gauge",
                             "1 while this process holds the destination's lease (delivers it).",
                             DESTINATION)
DELIVERY_LAG_EVENTS = MetricSpec("delivery_lag_events", "gauge",
                                 "Events persisted above the destination's cursor.",
                                 DESTINATION)
DELIVERY_LAG_SECONDS = MetricSpec("delivery_lag_seconds", "gauge",
                                  "Age of the oldest event the destination has not taken yet "
                                  "(0 when caught up).", DESTINATION)
EVENTS_DELIVERED = MetricSpec("events_delivered", "counter",
                              "Events the destination acknowledged.", DESTINATION)
EVENTS_UNDELIVERABLE = MetricSpec("events_undeliverable", "counter",
                                  "Events the destination refused for good (listed by "
                                  "`sharedstream events undelivered`).", DESTINATION)
DELIVERY_FAILURES = MetricSpec("delivery_failures", "counter",
                               "Failed deliveries by reason (transient ones are retried).",
                               ("destination", "reason"))

REGISTRY = ("registry",)
REGISTRY_OUT = MetricSpec("schema_registry_out", "gauge",
                          "1 while the schema registry fails lookups (messages that need it "
                          "are held), from its first failed lookup to its next answer.",
                          REGISTRY)
REGISTRY_FAILURES = MetricSpec("schema_registry_failures", "counter",
                               "Schema lookups that failed for want of the registry, each a "
                               "held message retried later, by reason (unreachable, "
                               "http_<status>, not_found within missing.schema.grace.sec, "
                               "not_configured).", ("registry", "reason"))

LOOP_LAG = MetricSpec("event_loop_lag_seconds", "gauge",
                      "How long the event loop took to run the watchdog's latest callback; "
                      "while the loop is blocked, how long it has not run.")
LOOP_BLOCKS = MetricSpec("event_loop_blocks", "counter",
                         "Times one step held the event loop past the warning threshold, by "
                         "the watcher whose filter held it (\"\": not a watcher).", ("watcher",))
LOOP_BLOCKED_SECONDS = MetricSpec("event_loop_blocked_seconds", "counter",
                                  "Seconds the event loop was blocked, by watcher, counted "
                                  "when each block ends.", ("watcher",))

CATALOG: tuple[MetricSpec, ...] = (
    GROUP_POLLING, GROUP_PAUSED, IN_FLIGHT, QUEUED, RECEIVED, REDELIVERED, OUTCOMES,
    GROUP_OUTCOMES, WATCHER_LAG, LAG_PAUSES, BROKER_READY, ASSIGNED, HELD, PARTITION_LAG,
    COMMIT_LAG, PARTITION_PAUSED, FLOOR_DISTANCE, OPEN_BYTES, AT_BOUND, PAUSED_BECAUSE,
    *KAFKA_COUNTERS.values(),
    DATABASE_HEALTHY,
    UOW_QUEUED, UOW_LATENCY,
    UOW_BATCHES, EVENTS_PERSISTED, UOW_CONFIRMED, UOW_REJECTED, UOW_FAILURES, UOW_PERMANENT,
    HEARTBEAT_FAILURES, DELIVERY_HOLDER, DELIVERY_LAG_EVENTS, DELIVERY_LAG_SECONDS,
    EVENTS_DELIVERED, EVENTS_UNDELIVERABLE, DELIVERY_FAILURES, REGISTRY_OUT, REGISTRY_FAILURES,
    LOOP_LAG, LOOP_BLOCKS, LOOP_BLOCKED_SECONDS,
)


def watcher_outcomes(cohort: Iterable[str], counters: GroupCounters
                     ) -> tuple[dict[str, int], list[tuple[str, dict[str, int]]]]:
    """A group's outcomes summed over its watchers (and its unrouted messages), and the
    watchers shown one by one: all of a group of at most ``PER_WATCHER_ALL``, else the
    ``PER_WATCHER_TOP`` that failed and rejected most (then by name). O(watchers) per
    scrape, never per message; a scrape of 10,000 watchers stays a few dozen series."""
    every = [(watcher, counters.outcomes(watcher)) for watcher in sorted(cohort)]
    totals = {"acked": 0, "failed": 0, "rejected": 0}
    for _, outcomes in every:
        for outcome, value in outcomes.items():
            totals[outcome] = totals.get(outcome, 0) + value
    totals[UNROUTED] = counters.unrouted
    if len(every) <= PER_WATCHER_ALL:
        return totals, every
    troubled = sorted(every, key=lambda w: (-(w[1]["failed"] + w[1]["rejected"]), w[0]))
    return totals, sorted(troubled[:PER_WATCHER_TOP])


def lag_episodes(counters: GroupCounters) -> list[tuple[str, int]]:
    """The watchers that lagged and how often, as ``watcher_outcomes`` bounds its series:
    all of at most ``PER_WATCHER_ALL``, else the ``PER_WATCHER_TOP`` that lagged most.
    O(watchers that lagged) per scrape."""
    lagged = sorted(counters.lagged.items())
    if len(lagged) <= PER_WATCHER_ALL:
        return lagged
    return sorted(sorted(lagged, key=lambda w: (-w[1], w[0]))[:PER_WATCHER_TOP])


class TriggererCollector(Collector):
    """Collects group, producer and unit-of-work figures of one triggerer."""

    def __init__(self, triggerer: TriggererView) -> None:
        self._triggerer = triggerer

    def collect(self) -> Iterator[Metric]:
        triggerer = self._triggerer
        names = {g.key: g.consumer_group for g in triggerer.plan.groups}
        families = {spec: spec.family() for spec in (
            GROUP_POLLING, GROUP_PAUSED, IN_FLIGHT, QUEUED, RECEIVED, REDELIVERED, OUTCOMES,
            GROUP_OUTCOMES, WATCHER_LAG, LAG_PAUSES, BROKER_READY, ASSIGNED, HELD,
            PARTITION_LAG, COMMIT_LAG, PARTITION_PAUSED, FLOOR_DISTANCE, OPEN_BYTES,
            AT_BOUND, PAUSED_BECAUSE, *KAFKA_COUNTERS.values())}

        def add(spec: MetricSpec, labels: list[str], value: float) -> None:
            families[spec].add_metric(labels, value)

        for status in triggerer.manager.status():
            name = names.get(status.key, repr(status.key))
            add(GROUP_POLLING, [name], float(status.polling))
            add(GROUP_PAUSED, [name], float(status.paused))
            add(IN_FLIGHT, [name], float(status.in_flight))
            add(QUEUED, [name], float(status.queued))
            counters = status.counters
            add(RECEIVED, [name], float(counters.received))
            add(REDELIVERED, [name], float(counters.redelivered))
            totals, shown = watcher_outcomes(status.cohort, counters)
            for outcome, value in totals.items():
                add(GROUP_OUTCOMES, [name, outcome], float(value))
            for watcher, outcomes in shown:
                for outcome, value in outcomes.items():
                    add(OUTCOMES, [name, watcher, outcome], float(value))
            for watcher, queued in status.lagging.items():
                add(WATCHER_LAG, [name, watcher], float(queued))
            for watcher, times in lag_episodes(counters):
                add(LAG_PAUSES, [name, watcher], float(times))
            producer = status.producer
            health = producer.health()
            add(BROKER_READY, [name], float(health.ready))
            add(ASSIGNED, [name], float(health.assigned_partitions))
            add(HELD, [name], float(health.held_messages))
            for (topic, partition), stats in producer.partition_stats().items():
                labels = [name, topic, str(partition)]
                add(PARTITION_LAG, labels, float(stats.lag))
                add(COMMIT_LAG, labels, float(stats.commit_lag))
                add(PARTITION_PAUSED, labels, float(stats.paused))
            for (topic, partition), load in producer.floor_distances().items():
                labels = [name, topic, str(partition)]
                add(FLOOR_DISTANCE, labels, float(load.distance))
                add(OPEN_BYTES, labels, float(load.open_bytes))
                add(AT_BOUND, labels, float(load.at_bound))
            for (topic, partition), reason in producer.paused_partitions().items():
                add(PAUSED_BECAUSE, [name, topic, str(partition), reason.value], 1.0)
            for counter, value in producer.counters().items():
                add(KAFKA_COUNTERS[counter], [name], float(value))
        yield from families.values()
        yield from _sink_metrics(triggerer.sink)
        if triggerer.heartbeat is not None:
            beats = HEARTBEAT_FAILURES.family()
            beats.add_metric([], float(triggerer.heartbeat.failures))
            yield beats
        yield from delivery_metrics(triggerer.delivery.states() if triggerer.delivery else [])
        # Its own registries, passed: a scrape runs on the health server's thread.
        registries = triggerer.registries
        yield from registry_metrics([] if registries is None else registry_figures(registries))
        yield from loop_metrics(triggerer.watchdog)


class DeliveryCollector(Collector):
    """What ``sharedstream deliver`` exports: its destinations and its event loop."""

    def __init__(self, delivery: DeliveryService, watchdog: LoopWatchdog) -> None:
        self._delivery = delivery
        self._watchdog = watchdog

    def collect(self) -> Iterator[Metric]:
        yield from delivery_metrics(self._delivery.states())
        yield from loop_metrics(self._watchdog)


def loop_metrics(watchdog: LoopWatchdog | None) -> Iterator[Metric]:
    """The event loop's lag and blocks (empty families before the watchdog exists)."""
    lag = LOOP_LAG.family()
    blocks, seconds = LOOP_BLOCKS.family(), LOOP_BLOCKED_SECONDS.family()
    if watchdog is not None:
        now, by_watcher, seconds_by_watcher = watchdog.figures()
        lag.add_metric([], now)
        for watcher, count in sorted(by_watcher.items()):
            blocks.add_metric([watcher], float(count))
        for watcher, total in sorted(seconds_by_watcher.items()):
            seconds.add_metric([watcher], total)
    yield from (lag, blocks, seconds)


def registry_metrics(figures: Sequence[RegistryFigures]) -> Iterator[Metric]:
    """The schema registries the watchers' lookups asked (sharedstream.serde.lookups)."""
    out, failures = REGISTRY_OUT.family(), REGISTRY_FAILURES.family()
    for one in figures:
        out.add_metric([one.registry], float(one.out))
        for reason, count in sorted(one.failures.items()):
            failures.add_metric([one.registry, reason], float(count))
    yield from (out, failures)


def delivery_metrics(states: Sequence[DestinationState]) -> Iterator[Metric]:
    """The destinations this process runs (``sharedstream run`` and ``deliver`` alike)."""
    families = {spec: spec.family() for spec in (
        DELIVERY_HOLDER, DELIVERY_LAG_EVENTS, DELIVERY_LAG_SECONDS, EVENTS_DELIVERED,
        EVENTS_UNDELIVERABLE, DELIVERY_FAILURES)}
    for state in states:
        labels = [state.id]
        families[DELIVERY_HOLDER].add_metric(labels, float(state.holder))
        families[DELIVERY_LAG_EVENTS].add_metric(labels, float(state.lag_events))
        families[DELIVERY_LAG_SECONDS].add_metric(labels, state.lag_seconds)
        families[EVENTS_DELIVERED].add_metric(labels, float(state.delivered))
        families[EVENTS_UNDELIVERABLE].add_metric(labels, float(state.undeliverable))
        for reason, count in sorted(state.failures.items()):
            families[DELIVERY_FAILURES].add_metric([state.id, reason], float(count))
    yield from families.values()


def _sink_metrics(sink: DatabaseWorkSink) -> Iterator[Metric]:
    figures = sink.figures
    for spec, value in ((DATABASE_HEALTHY, figures.healthy), (UOW_QUEUED, sink.queued),
                        (UOW_BATCHES, figures.batches), (EVENTS_PERSISTED, figures.events_written),
                        (UOW_CONFIRMED, figures.windows_confirmed),
                        (UOW_REJECTED, figures.windows_rejected), (UOW_FAILURES, figures.failures),
                        (UOW_PERMANENT, figures.permanent_failures)):
        family = spec.family()
        family.add_metric([], float(value))
        yield family
    yield SummaryMetricFamily(UOW_LATENCY.full_name, UOW_LATENCY.help,
                              count_value=sink.figures.batch_latency_count,
                              sum_value=sink.figures.batch_latency_sum)
