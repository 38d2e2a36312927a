"""The peers' side of ``bench/peers.py``: one process of quixstreams, arroyo or faust.

    python bench/peer_process.py PEER BOOTSTRAP TOPIC GROUP FILTERS KEEP CONFIG_JSON

Imports nothing of sharedstream or of the bench package (the peers may live in their
own environment: quixstreams pins an older confluent-kafka). Each peer is written the
way its own documentation shows, in consumer group GROUP: FILTERS filters over TOPIC
(the JSON orders of ``bench/decode_once.py``), each parsing through the library's own
JSON path and keeping the paid 1% when KEEP is 1; CONFIG_JSON is added to the
librdkafka settings (faust runs on aiokafka: it has none). It never stops by itself:
``bench/peers.py`` watches the group's committed offsets from outside and ends it with
SIGTERM once they reach the log end. Prints ``{"first": <time.time()>}`` at the first
message, the start-up mark.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

# Every peer commits what it processed; the interval matches sharedstream's
# (``commit_interval=0.1``) so that no side's run waits on a longer commit timer.
COMMIT_EVERY_S = 0.1
_first: list[float] = []


def mark_first() -> None:
    if not _first:
        _first.append(time.time())
        os.write(1, (json.dumps({"first": _first[0]}) + "\n").encode())  # past any logger


def quixstreams(bootstrap: str, topic: str, group: str, filters: int, keep: bool,
                config: dict[str, Any]) -> None:
    """An ``Application`` with a ``StreamingDataFrame`` per filter: one branch each off
    the topic's frame (values parsed once, by the topic's JSON deserialiser)."""
    from quixstreams import Application

    app = Application(broker_address=bootstrap, consumer_group=group,
                      auto_offset_reset="earliest", commit_interval=COMMIT_EVERY_S,
                      consumer_extra_config=config, loglevel="WARNING",
                      auto_create_topics=False)
    sdf = app.dataframe(app.topic(topic, value_deserializer="json"))
    kept: list[Any] = []

    def paid(value: Any) -> bool:
        if not _first:
            mark_first()
        return value["status"] == "paid" and keep

    for _ in range(filters):
        sdf.filter(paid).update(kept.append)
    app.run()


def arroyo(bootstrap: str, topic: str, group: str, filters: int, keep: bool,
           config: dict[str, Any]) -> None:
    """A ``StreamProcessor`` on arroyo's ``KafkaConsumer``: a ``RunTask`` parsing each
    value once and running every filter on it, then ``CommitOffsets``. (Not
    ``FilterStep``: with a commit policy it commits the offsets of dropped messages only
    when a later message arrives or at shutdown, so a filter keeping nothing never
    commits the log end while it runs, and arroyo has no fan-out step for ten filters.)"""
    from arroyo.backends.kafka import KafkaConsumer, KafkaPayload
    from arroyo.backends.kafka.configuration import build_kafka_consumer_configuration
    from arroyo.commit import CommitPolicy
    from arroyo.processing import StreamProcessor
    from arroyo.processing.strategies import (
        CommitOffsets,
        ProcessingStrategy,
        ProcessingStrategyFactory,
        RunTask,
    )
    from arroyo.types import Commit, Message, Partition, Topic

    kept: list[Any] = []

    def run_filters(message: Message[KafkaPayload]) -> None:
        if not _first:
            mark_first()
        order = json.loads(message.payload.value)
        for _ in range(filters):
            if order["status"] == "paid" and keep:
                kept.append(order)

    class Factory(ProcessingStrategyFactory[KafkaPayload]):
        def create_with_partitions(self, commit: Commit,
                                   partitions: Mapping[Partition, int]
                                   ) -> ProcessingStrategy[KafkaPayload]:
            return RunTask(run_filters, CommitOffsets(commit))

    consumer = KafkaConsumer(build_kafka_consumer_configuration(
        default_config={}, bootstrap_servers=[bootstrap], group_id=group,
        auto_offset_reset="earliest",
        # arroyo commits through librdkafka's auto-commit of the offsets it stored
        # after processing: its timer (5 s by default) set to the same interval.
        override_params={"auto.commit.interval.ms": int(COMMIT_EVERY_S * 1000), **config}))
    policy = CommitPolicy(min_commit_frequency_sec=COMMIT_EVERY_S, min_commit_messages=None)
    processor = StreamProcessor(consumer, Topic(topic), Factory(), commit_policy=policy)
    signal.signal(signal.SIGTERM, lambda *_: processor.signal_shutdown())
    processor.run()


def faust(bootstrap: str, topic: str, group: str, filters: int, keep: bool,
          config: dict[str, Any]) -> None:
    """A ``faust.App`` with one agent per filter on the topic (the app's one consumer
    feeds every agent), run by a ``faust.Worker``."""
    import faust as faust_lib

    app = faust_lib.App(group, broker=f"kafka://{bootstrap}", web_enabled=False,
                        consumer_auto_offset_reset="earliest",
                        broker_commit_interval=COMMIT_EVERY_S, topic_disable_leader=True)
    source = app.topic(topic, value_serializer="json")
    kept: list[Any] = []

    async def agent(stream: Any) -> None:
        async for order in stream:
            if not _first:
                mark_first()
            if order["status"] == "paid" and keep:
                kept.append(order)

    for i in range(filters):
        app.agent(source, name=f"filter{i}")(agent)
    faust_lib.Worker(app, loglevel="WARNING").execute_from_commandline()


PEERS = {"quixstreams": quixstreams, "arroyo": arroyo, "faust": faust}


def main(peer: str, bootstrap: str, topic: str, group: str, filters: str, keep: str,
         config: str) -> None:
    PEERS[peer](bootstrap, topic, group, int(filters), keep == "1", json.loads(config))


if __name__ == "__main__":
    main(*sys.argv[1:])
