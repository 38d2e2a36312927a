"""Throughput of the shared stream next to plain confluent-kafka, in one run on one broker.

Figures (all in messages delivered per second, measured the same way):

* ``plain``: one confluent-kafka consumer, batch ``consume()``: the ceiling;
* ``shared_<n>``: ``SharedStreamManager`` + ``KafkaSharedStreamProducer`` with n
  watchers on one consumer, each running the default ``KafkaSharedStreamTrigger``
  filter (one UTF-8 event per message) into a sink that confirms every unit of
  work at once (no persistence). The full ack path runs: the partition ledger,
  windows, acks, commit targets, coalesced commits; the run ends when every watcher
  is done with every message, and the final commit is then checked to have reached
  the end of every partition;
* ``independent_<n>``: the pre-sharing model, n plain consumers (one per
  trigger, each its own group and thread) reading the same topic, counting
  messages only (C speed: no trigger code runs);
* ``independent_filtered_<n>``: the same consumers, each also doing what its
  trigger would do with every message in Python: decode the value as UTF-8 and
  build a ``TriggerEvent`` (the default filter), and commit after every batch.
  This is the pre-sharing model with the same per-message work the shared
  watchers do, so the two rates compare like for like.

Fairness: every figure is timed from the first message delivered (so group join
and assignment are excluded) to the last, on topics filled beforehand; 1-watcher
figures use the main topic, fan-out figures a smaller one (n times the
deliveries). Ratios are to ``plain``.

    python bench/kafka_throughput.py [--messages 200000] [--fanout-messages 20000]
        [--watchers 1,10,100] [--out bench/results]

Writes ``<out>/kafka_throughput.json`` and ``.png`` and prints a Markdown table.
The broker is ``KAFKA_BOOTSTRAP_SERVERS`` or a local one (``scripts/localservices``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.core.window import Window
from sharedstream.kafka.connections import resolve_connection
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.kafka.runtime import configure_kafka_runtime, kafka_runtime
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

PARTITIONS = 3
SIZE = 100
BATCH = 1000


@dataclass
class Idle:
    """An idle phase at the end of a run: how long, and when it started (perf_counter)."""

    seconds: float
    start: float = 0.0


def fill(bootstrap: str, messages: int, value: Callable[[int], bytes] | None = None) -> str:
    """A fresh topic of ``messages`` records of ``SIZE`` bytes (or ``value(i)``), round
    robin over partitions."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    fixed = b"x" * SIZE
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, fixed if value is None else value(i),
                                 partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError(f"filling {topic} timed out")
    return topic


def _plain_consumer(bootstrap: str, extra: Mapping[str, Any] | None = None) -> Any:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     **(extra or {})})


Work = Callable[[list[Any]], object]


def _consume_all(consumer: Any, messages: int, first: list[float],
                 filtered: bool = False, work: Work | None = None) -> float:
    """Consume ``messages``; record the first delivery in ``first``; return the end time.

    ``filtered``: run the default trigger's per-message work on each message and commit
    each batch (asynchronously), as a trigger with its own consumer would; ``work``: run
    this on each batch's good messages instead, and commit each batch the same way."""
    seen = 0
    while seen < messages:
        batch = consumer.consume(num_messages=BATCH, timeout=1.0)
        if batch and not first:
            first.append(time.perf_counter())
        if work is not None:
            good = [m for m in batch if m.error() is None]
            work(good)
            seen += len(good)
            if good:
                consumer.commit(asynchronous=True)
        elif filtered:
            events = [TriggerEvent(m.value().decode("utf-8")) for m in batch
                      if m.error() is None]
            seen += len(events)
            if events:
                consumer.commit(asynchronous=True)
        else:
            seen += sum(1 for m in batch if m.error() is None)
    return time.perf_counter()


def plain(bootstrap: str, topic: str, messages: int) -> float:
    """Messages/s of one consumer from its first delivered message to the last."""
    consumer = _plain_consumer(bootstrap)
    consumer.subscribe([topic])
    first: list[float] = []
    end = _consume_all(consumer, messages, first)
    consumer.close()
    return messages / (end - first[0])


def independent(bootstrap: str, topic: str, messages: int, consumers: int,
                extra: Callable[[int], Mapping[str, Any]] | None = None,
                filtered: bool = False, idle: Idle | None = None,
                work: Work | None = None) -> float:
    """Total deliveries/s of ``consumers`` plain consumers, each its own group and thread;
    ``extra(i)`` adds settings to consumer i (e.g. a statistics callback); ``filtered``
    runs the trigger's per-message work, ``work`` a given one (see :func:`_consume_all`).
    With ``idle``, every
    consumer keeps polling at the end of the log for ``idle.seconds`` after the last one
    finished (an idle phase, for steady-state statistics), from ``idle.start``."""
    firsts: list[list[float]] = [[] for _ in range(consumers)]
    ends = [0.0] * consumers
    clients = [_plain_consumer(bootstrap, extra(i) if extra else None)
               for i in range(consumers)]
    finished = threading.Barrier(consumers + 1)

    def run(i: int) -> None:
        clients[i].subscribe([topic])
        ends[i] = _consume_all(clients[i], messages, firsts[i], filtered, work)
        if idle is not None:
            finished.wait()
            finished.wait()  # the main thread has set idle.start in between
            while time.perf_counter() < idle.start + idle.seconds:
                clients[i].consume(num_messages=BATCH, timeout=0.1)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(consumers)]
    for thread in threads:
        thread.start()
    if idle is not None:
        finished.wait()
        idle.start = time.perf_counter()
        finished.wait()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    return consumers * messages / (max(ends) - min(f[0] for f in firsts))


class BenchTrigger(KafkaSharedStreamTrigger):
    """The default trigger and filter, on a producer built from the bench's connection."""

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> KafkaSharedStreamProducer:
        runtime = kafka_runtime()
        return KafkaSharedStreamProducer(
            topics=kwargs["topics"], recorder=runtime.recorder,
            config=resolve_connection(kwargs["kafka_config_id"], runtime.connections),
            connection_id=kwargs["kafka_config_id"])


class ConfirmingSink:
    """Confirms every unit of work at once; notes when the first one arrived."""

    def __init__(self) -> None:
        self.first = 0.0

    def submit(self, windows: Sequence[Window]) -> None:
        if not self.first:
            self.first = time.perf_counter()
        for window in windows:
            window.confirm()


async def shared(bootstrap: str, topic: str, messages: int, watchers: int, *,
                 sink: Any = None, trigger: type[BenchTrigger] = BenchTrigger,
                 idle: Idle | None = None, config: Mapping[str, Any] | None = None,
                 marks: dict[str, float] | None = None) -> float:
    """Deliveries/s (messages x watchers) through the manager, first delivery to the moment
    every watcher is done with every message.

    ``config``: librdkafka settings added to the bench's connection. ``marks``, when
    given, gets ``committed``: the ``time.time()`` at which the final commit of every
    message was acknowledged by the broker, and ``cpu_s``: the process's CPU seconds then.

    ``sink`` (default: a :class:`ConfirmingSink`, no persistence) receives the units of
    work; it needs a ``first`` attribute set at its first submit. ``trigger`` is the
    watchers' trigger class (its filter decides what is kept). ``idle``: the group stays
    up, idle at the end of the log, ``idle.seconds`` after the last message (from
    ``idle.start``)."""
    conn_id = f"bench{uuid.uuid4().hex[:6]}"
    settings = {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, **(config or {})}
    group_id = settings["group.id"]  # ``config`` may name it (bench/peers.py watches it)
    configure_kafka_runtime({conn_id: settings}, InMemoryRejectionRecorder())
    sink = sink if sink is not None else ConfirmingSink()
    manager = SharedStreamManager(sink, ManagerSettings(cohort_grace_period=0))
    triggers = {f"w{i}": trigger(topics=[topic], kafka_config_id=conn_id)
                for i in range(watchers)}
    manager.declare_cohort(next(iter(triggers.values())).shared_stream_key(), triggers)
    tasks = [asyncio.create_task(manager.run_watcher(n, t)) for n, t in triggers.items()]
    await asyncio.sleep(0)  # the watchers subscribe: the group exists
    counters = manager._groups[next(iter(triggers.values())).shared_stream_key()].counters
    # Polled (1 ms): the group has no end-of-run event, and a hook on the hot path would
    # cost more than the poll.
    while counters.settled < messages:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    end = time.perf_counter()
    if idle is not None:
        idle.start = end
        await asyncio.sleep(idle.seconds)
    [status] = manager.status()
    producer = status.producer
    assert isinstance(producer, KafkaSharedStreamProducer)
    await producer.commit()
    if marks is not None:
        marks["committed"] = time.time()
        marks["cpu_s"] = time.process_time()
    await manager.stop_all()
    await asyncio.gather(*tasks)
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group_id}.{topic}"})
    offsets = check.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    check.close()
    if sum(tp.offset for tp in offsets) != messages:
        raise RuntimeError(f"final commit did not reach the end: {offsets}")
    first: float = sink.first
    return messages * watchers / (end - first)


def chart(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kind, marker in (("shared", "o"), ("independent", "s"), ("independent_filtered", "^")):
        points = sorted((r["watchers"], r["deliveries_per_s"]) for r in rows if r["kind"] == kind)
        if points:
            ax.plot(*zip(*points, strict=True), marker=marker,
                    label={"shared": "sharedstream (one shared consumer)",
                           "independent": "one plain consumer per trigger, counting only",
                           "independent_filtered": "one consumer per trigger, with its "
                                                   "filter's work"}[kind])
    base = next(r["deliveries_per_s"] for r in rows if r["kind"] == "plain")
    ax.axhline(base, color="grey", linestyle="--", label="plain consume(), 1 consumer")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("watchers (triggers)")
    ax.set_ylabel("deliveries / s (messages x watchers)")
    ax.set_title("Throughput vs watchers, no persistence")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| run | watchers | messages | deliveries/s | us/message | ratio to plain |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['watchers']} | {r['messages']:,} | "
                     f"{r['deliveries_per_s']:,.0f} | {r['us_per_message']:.2f} | "
                     f"{r['ratio_to_plain']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--fanout-messages", type=int, default=20_000)
    parser.add_argument("--watchers", default="1,10,100",
                        help="comma-separated watcher counts (1 uses --messages)")
    parser.add_argument("--no-independent", action="store_true",
                        help="skip the one-consumer-per-trigger runs")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    tune_gc()  # as `sharedstream run` does once start-up is over
    counts = [int(n) for n in args.watchers.split(",")]
    broker: Any = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        # Imported here, not at the top: bench/json_fanout.py times processes that import
        # this module, and localservices brings psycopg and pymysql (~0.13 s).
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
        from localservices import KafkaBroker  # type: ignore[import-not-found]

        broker = KafkaBroker()
        broker.start()
        bootstrap = broker.bootstrap
    rows: list[dict[str, Any]] = []

    def row(kind: str, watchers: int, messages: int, rate: float) -> None:
        rows.append({"kind": kind, "watchers": watchers, "messages": messages,
                     "deliveries_per_s": round(rate),
                     "us_per_message": 1e6 * watchers / rate})
        print(f"{kind:>12} watchers={watchers:<4} {rate:>12,.0f} deliveries/s", flush=True)

    try:
        topic = fill(bootstrap, args.messages)
        fanout = fill(bootstrap, args.fanout_messages) if any(n > 1 for n in counts) else topic
        row("plain", 1, args.messages, plain(bootstrap, topic, args.messages))
        for n in counts:
            t, m = (topic, args.messages) if n == 1 else (fanout, args.fanout_messages)
            row("shared", n, m, asyncio.run(shared(bootstrap, t, m, n)))
        if not args.no_independent:
            for n in counts:
                if n > 1:
                    row("independent", n, args.fanout_messages,
                        independent(bootstrap, fanout, args.fanout_messages, n))
                    row("independent_filtered", n, args.fanout_messages,
                        independent(bootstrap, fanout, args.fanout_messages, n, filtered=True))
    finally:
        if broker is not None:
            broker.stop()
    base = rows[0]["deliveries_per_s"]
    for r in rows:
        r["ratio_to_plain"] = r["deliveries_per_s"] / base
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "platform": platform.platform()},
              "partitions": PARTITIONS, "message_bytes": SIZE, "rows": rows}
    (args.out / "kafka_throughput.json").write_text(json.dumps(result, indent=2))
    chart(rows, args.out / "kafka_throughput.png")
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
