"""A group's lag now, from the broker: what the progress line prints.

librdkafka's statistics (kafka/stats.py, behind ``/metrics``) are up to
``statistics.interval.ms`` (5 s) old, say nothing of a partition never committed, and
stop moving for a partition paused at its bound, which fetches nothing, so its log end
is never learnt again: a lag read there can be minutes old (issue 43). :class:`LagProbe`
asks the broker instead, once per progress line: the committed offsets of the group's
partitions in one request, their log ends (and, for those never committed, log starts)
in another. Per partition the lag is the log end minus the committed offset, or minus
the log start when nothing was committed, as ``sharedstream offsets show`` counts it.

It blocks (the adapter calls it on a worker thread) and raises
``confluent_kafka.KafkaException`` or ``TimeoutError`` when the broker does not answer
within ``timeout``; the caller prints ``?`` then, never an older figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

from sharedstream.kafka.connections import client_config

Key = tuple[str, int]


class LagProbe:
    """The admin requests behind one group's fresh lag, on one admin client kept for the
    adapter's life (created at the first ask)."""

    def __init__(self, config: Mapping[str, Any], consumer_group: str) -> None:
        self._config = config
        self._group = consumer_group
        self._admin: AdminClient | None = None

    def lag(self, keys: Sequence[Key], timeout: float) -> int:
        """The summed lag of ``keys``, asked now (see the module doc)."""
        if not keys:
            return 0
        admin = self._client()
        request = [ConsumerGroupTopicPartitions(
            self._group, [TopicPartition(t, p) for t, p in keys])]
        answer = admin.list_consumer_group_offsets(request, request_timeout=timeout)
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in answer[self._group].result(timeout=timeout).topic_partitions
                     if tp.offset >= 0}
        ends = self._offsets(admin, keys, _spec("latest"), timeout)
        never = [key for key in keys if key not in committed]
        starts = self._offsets(admin, never, _spec("earliest"), timeout) if never else {}
        return sum(max(ends[key] - committed.get(key, starts.get(key, 0)), 0)
                   for key in keys)

    def close(self) -> None:
        """Drop the admin client here, on the caller's thread: left to the garbage
        collector, it could be freed from one of librdkafka's own threads, which aborts
        the process (see ``ops/offsets.py``)."""
        self._admin = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            config = client_config(self._config)
            config["error_cb"] = _ignore  # a failed request raises instead
            self._admin = AdminClient(config)
        return self._admin

    @staticmethod
    def _offsets(admin: AdminClient, keys: Sequence[Key], spec: Any,
                 timeout: float) -> dict[Key, int]:
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in keys},
                                     request_timeout=timeout)
        return {(tp.topic, tp.partition): int(future.result(timeout=timeout).offset)
                for tp, future in futures.items()}


def _spec(where: str) -> Any:
    # OffsetSpec is untyped in confluent-kafka's stubs (as in ops/offsets.py).
    spec: Any = _OffsetSpec
    return spec.latest() if where == "latest" else spec.earliest()


def _ignore(_error: KafkaError) -> None:
    """Connection errors surface as the request's own failure."""
