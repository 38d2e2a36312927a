"""Prometheus metrics, read from the running parts at scrape time.

Nothing on the hot path calls a metrics library: the manager, producers and
the unit-of-work sink keep plain integer counters, and this collector turns a
snapshot of them into metric families when ``/metrics`` is scraped. A scrape
therefore costs the process nothing between scrapes, and counting a message is
one integer addition.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from sharedstream.triggerer.process import Triggerer

PREFIX = "sharedstream"


class TriggererCollector(Collector):
    """Collects group, producer and unit-of-work figures of one triggerer."""

    def __init__(self, triggerer: Triggerer) -> None:
        self._triggerer = triggerer

    def collect(self) -> Iterator[Metric]:
        triggerer = self._triggerer
        groups = {g.key: g for g in triggerer.plan.groups}
        labels = ["group"]
        up = GaugeMetricFamily(f"{PREFIX}_group_polling",
                               "1 when the group polls with its whole cohort present.",
                               labels=labels)
        paused = GaugeMetricFamily(f"{PREFIX}_group_paused",
                                   "1 while fetching is paused (in-flight or queue bound).",
                                   labels=labels)
        in_flight = GaugeMetricFamily(f"{PREFIX}_in_flight_messages",
                                      "Messages broadcast and not yet resolved, or held.",
                                      labels=labels)
        queued = GaugeMetricFamily(f"{PREFIX}_queued_messages",
                                   "Messages waiting in watchers' queues.", labels=labels)
        ready = GaugeMetricFamily(f"{PREFIX}_broker_ready",
                                  "1 when the group's broker connection is healthy.",
                                  labels=labels)
        assigned = GaugeMetricFamily(f"{PREFIX}_assigned_partitions",
                                     "Partitions assigned to this process.", labels=labels)
        held = GaugeMetricFamily(f"{PREFIX}_held_messages",
                                 "Messages held for redelivery (lane floors).", labels=labels)
        counters: dict[str, CounterMetricFamily] = {}
        for status in triggerer.manager.status():
            plan = groups.get(status.key)
            name = plan.consumer_group if plan is not None else repr(status.key)
            up.add_metric([name], float(status.polling))
            paused.add_metric([name], float(status.paused))
            in_flight.add_metric([name], float(status.in_flight))
            queued.add_metric([name], float(status.queued))
            producer: Any = status.producer
            ready.add_metric([name], float(bool(getattr(producer, "ready", True))))
            health = getattr(producer, "health", None)
            if health is not None:
                snapshot = health()
                assigned.add_metric([name], float(snapshot.assigned_partitions))
                held.add_metric([name], float(snapshot.held_messages))
            for counter, value in getattr(producer, "counters", dict)().items():
                family = counters.get(counter)
                if family is None:
                    family = counters[counter] = CounterMetricFamily(
                        f"{PREFIX}_{counter}", f"Producer counter {counter}.", labels=labels)
                family.add_metric([name], float(value))
        yield from (up, paused, in_flight, queued, ready, assigned, held, *counters.values())
        yield from _sink_metrics(triggerer.sink)


def _sink_metrics(sink: Any) -> Iterator[Metric]:
    healthy = GaugeMetricFamily(f"{PREFIX}_database_healthy",
                                "1 while units of work commit; 0 while the database fails.")
    healthy.add_metric([], float(bool(sink.healthy)))
    yield healthy
    for counter, value in getattr(sink, "counters", dict)().items():
        family = CounterMetricFamily(f"{PREFIX}_{counter}", f"Unit-of-work counter {counter}.")
        family.add_metric([], float(value))
        yield family
