"""Prometheus metrics, read from the running parts at scrape time.

Nothing on the hot path calls a metrics library: the manager's groups, the Kafka
producers and the unit-of-work sink keep plain integer counters, and this
collector turns a snapshot of them into metric families when ``/metrics`` is
scraped. Counting a message is one integer addition; a scrape costs nothing
between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from sharedstream.kafka.producer import KafkaSharedStreamProducer

if TYPE_CHECKING:
    from sharedstream.triggerer.persistence import DatabaseWorkSink
    from sharedstream.triggerer.process import Triggerer

PREFIX = "sharedstream"


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=labels)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=labels)


class TriggererCollector(Collector):
    """Collects group, producer and unit-of-work figures of one triggerer."""

    def __init__(self, triggerer: Triggerer) -> None:
        self._triggerer = triggerer

    def collect(self) -> Iterator[Metric]:
        triggerer = self._triggerer
        names = {g.key: g.consumer_group for g in triggerer.plan.groups}
        g = ["group"]
        polling = _gauge("group_polling", "1 when the group polls with its cohort.", g)
        paused = _gauge("group_paused", "1 while fetching is paused (a bound is reached).", g)
        in_flight = _gauge("in_flight_messages", "Messages not yet resolved, or held.", g)
        queued = _gauge("queued_messages", "Messages waiting in watchers' queues.", g)
        received = _counter("messages_received", "Messages handed to the group's watchers "
                            "(first deliveries and re-reads).", g)
        redelivered = _counter("redeliveries", "Held messages delivered again.", g)
        outcomes = _counter("watcher_outcomes", "Per-watcher outcomes of messages.",
                            ["group", "watcher", "outcome"])
        ready = _gauge("broker_ready", "1 when the group's broker connection is healthy.", g)
        assigned = _gauge("assigned_partitions", "Partitions assigned to this process.", g)
        held = _gauge("held_messages", "Messages held for redelivery (lane floors).", g)
        p = ["group", "topic", "partition"]
        lag = _gauge("partition_lag", "Messages on the broker not yet committed.", p)
        commit_lag = _gauge("partition_commit_lag",
                            "Messages handed out but not yet committed (redelivered after a "
                            "crash now).", p)
        paused_partitions = _gauge("partition_paused", "1 while the partition is paused.", p)
        floor_distance = _gauge("partition_floor_distance",
                                "Messages read above the partition's floor (its first "
                                "unresolved message); bounded by max_in_flight.", p)
        open_bytes = _gauge("partition_open_bytes",
                            "Key and value bytes of the partition's unresolved messages; "
                            "bounded by max_in_flight_bytes.", p)
        at_bound = _gauge("partition_at_bound",
                          "1 while the partition is paused at max_in_flight messages above "
                          "its floor (a held message waits).", p)
        producer_counters: dict[str, CounterMetricFamily] = {}
        for status in triggerer.manager.status():
            name = names.get(status.key, repr(status.key))
            polling.add_metric([name], float(status.polling))
            paused.add_metric([name], float(status.paused))
            in_flight.add_metric([name], float(status.in_flight))
            queued.add_metric([name], float(status.queued))
            counters = status.counters
            received.add_metric([name], float(counters.received))
            redelivered.add_metric([name], float(counters.redelivered))
            for watcher in sorted(status.cohort):
                for outcome, value in counters.outcomes(watcher).items():
                    outcomes.add_metric([name, watcher, outcome], float(value))
            producer = status.producer
            if not isinstance(producer, KafkaSharedStreamProducer):
                continue
            health = producer.health()
            ready.add_metric([name], float(health.ready))
            assigned.add_metric([name], float(health.assigned_partitions))
            held.add_metric([name], float(health.held_messages))
            for (topic, partition), stats in producer.partition_stats.items():
                labels = [name, topic, str(partition)]
                lag.add_metric(labels, float(stats.lag))
                commit_lag.add_metric(labels, float(stats.commit_lag))
                paused_partitions.add_metric(labels, float(stats.paused))
            for (topic, partition), load in producer.floor_distances().items():
                labels = [name, topic, str(partition)]
                floor_distance.add_metric(labels, float(load.distance))
                open_bytes.add_metric(labels, float(load.open_bytes))
                at_bound.add_metric(labels, float(load.at_bound))
            for counter, value in producer.counters().items():
                family = producer_counters.get(counter)
                if family is None:
                    family = producer_counters[counter] = _counter(
                        counter, f"Kafka producer: {counter.replace('_', ' ')}.", g)
                family.add_metric([name], float(value))
        yield from (polling, paused, in_flight, queued, received, redelivered, outcomes, ready,
                    assigned, held, lag, commit_lag, paused_partitions, floor_distance,
                    open_bytes, at_bound)
        yield from producer_counters.values()
        yield from _sink_metrics(triggerer.sink)


def _sink_metrics(sink: DatabaseWorkSink) -> Iterator[Metric]:
    healthy = _gauge("database_healthy",
                     "1 while units of work commit; 0 while the database fails.", [])
    healthy.add_metric([], float(sink.healthy))
    queued = _gauge("uow_queued_windows", "Windows waiting for a unit-of-work batch.", [])
    queued.add_metric([], float(sink.queued))
    latency = SummaryMetricFamily(f"{PREFIX}_uow_batch_latency_seconds",
                                  "Time from a batch's first commit attempt to its commit.",
                                  count_value=sink.batch_latency_count,
                                  sum_value=sink.batch_latency_sum)
    yield from (healthy, queued, latency)
    for counter, value in (("uow_batches", sink.batches),
                           ("events_persisted", sink.events_written),
                           ("uow_windows_confirmed", sink.windows_confirmed),
                           ("uow_windows_rejected", sink.windows_rejected),
                           ("uow_commit_failures", sink.failures),
                           ("uow_permanent_failures", sink.permanent_failures)):
        family = _counter(counter, f"Units of work: {counter.replace('_', ' ')}.", [])
        family.add_metric([], float(value))
        yield family
