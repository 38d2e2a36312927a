"""The hand-off probe: how often the consumer thread wakes the event loop.

A wake is a ``call_soon_threadsafe`` from the consumer thread: a self-pipe write, after
which that thread waits for the GIL while the loop it woke runs. On the real broker,
one watcher keeps nothing of a backlog through the batch API (the least work per
message on the loop, so the hand-off's share is largest), in this process; the loop
counts the calls made from other threads. Printed per run: deliveries/s (first delivery
to the last, ``kafka_throughput``'s timing), wakes per 1,000 messages, and the CPU
seconds of the consumer thread and of the loop's thread per wall second. First, the
consumer thread's wrapping alone: µs per record of its hand-over of each batch
(``ConsumerThread._hand_over``: wrap and post) over 60,000 records read from the broker
(best of seven passes).

    PYTHONPATH=src python -m bench.handoff --bootstrap HOST:PORT [--messages 200000]
        [--runs 3]

Run old and new code back to back (a ``git worktree`` of the old commit) on the same
topic size: the machine's load moves every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import gc
import json
import statistics
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVarTuple

from bench import kafka_throughput as kt
from confluent_kafka import Consumer

from sharedstream.core.batch import MessageBatch
from sharedstream.kafka.consumer_thread import ConsumerThread
from sharedstream.kafka.handoff import HandOff

Ts = TypeVarTuple("Ts")


class CountingLoop(asyncio.SelectorEventLoop):
    """Counts ``call_soon_threadsafe`` calls made from other threads than the loop's."""

    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0
        self.owner = threading.get_ident()

    def call_soon_threadsafe(self, callback: Callable[[*Ts], object], *args: *Ts,
                             context: contextvars.Context | None = None) -> asyncio.Handle:
        if threading.get_ident() != self.owner:
            self.wakes += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


class DropBatch(kt.BenchTrigger):
    """Keeps nothing, reads nothing: what remains is the framework's own cost."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        return None


def thread_cpu_s(name_prefix: str) -> float:
    """CPU seconds of the live threads whose names start with ``name_prefix``."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident))
               for t in threading.enumerate()
               if t.name.startswith(name_prefix) and t.ident is not None)


async def one_run(bootstrap: str, topic: str, messages: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, CountingLoop)
    marks: dict[str, float] = {}
    loop_cpu = time.thread_time()
    consumer_cpu: list[float] = []
    wall = time.perf_counter()

    sink = kt.ConfirmingSink()  # nothing kept, nothing submitted: timed from the first batch

    class Sampled(DropBatch):
        async def filter_shared_batch(self, batch: MessageBatch) -> None:
            if not sink.first:
                sink.first = time.perf_counter()
            # Sampled once the last batch arrived, while the consumer thread still lives.
            if batch.messages[-1].offset >= messages // kt.PARTITIONS - 1:
                consumer_cpu[:] = [thread_cpu_s("sharedstream:")]

    rate = await kt.shared(bootstrap, topic, messages, 1, trigger=Sampled, sink=sink,
                           marks=marks)
    wall = time.perf_counter() - wall
    return {"per_s": rate, "wakes_per_1000": 1000 * loop.wakes / messages,
            "consumer_cpu_per_wall": (consumer_cpu[0] if consumer_cpu else 0.0) / wall,
            "loop_cpu_per_wall": (time.thread_time() - loop_cpu) / wall}


def wrap_us(bootstrap: str, count: int = 60_000) -> float:
    """µs per record of the consumer thread's wrapping and posting of a batch
    (``ConsumerThread._hand_over``, batches as consumed), best of 7.

    The thread object is made without its constructor: the hand-over reads only what
    is set here (what the thread owns, the topic ids, the settings it names), so the
    same probe runs on older code too. The collector is off while a pass runs: what
    a pass builds stays queued, and walking 60,000 held records is the probe's own cost,
    not the thread's."""
    topic = kt.fill(bootstrap, count)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wrap-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    batches: list[list[Any]] = []
    while sum(map(len, batches)) < count:
        if batch := consumer.consume(kt.BATCH, 1.0):
            batches.append(batch)
    consumer.close()
    read = sum(map(len, batches))
    thread: Any = ConsumerThread.__new__(ConsumerThread)
    thread.owned = {(topic, p): 1 for p in range(kt.PARTITIONS)}
    thread.watch = SimpleNamespace(ids={topic: "id"})
    thread.s = SimpleNamespace(replay_topic=None, topics=(topic,))
    thread.read_as = {}
    best = float("inf")
    for _ in range(7):
        thread.hand = HandOff()  # never attached: a post only queues
        gc.disable()  # the records of a pass stay queued: no collection walks them
        start = time.perf_counter()
        for batch in batches:
            thread._hand_over(batch)
        best = min(best, (time.perf_counter() - start) / read * 1e6)
        gc.enable()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps({"wrap_us_per_record": round(wrap_us(args.bootstrap), 3)}), flush=True)
    topic = kt.fill(args.bootstrap, args.messages)
    runs = []
    for _ in range(args.runs):
        with asyncio.Runner(loop_factory=CountingLoop) as runner:
            runs.append(runner.run(one_run(args.bootstrap, topic, args.messages)))
        print(json.dumps({k: round(v, 3) for k, v in runs[-1].items()}), flush=True)
    print(json.dumps({"median": {k: round(statistics.median(r[k] for r in runs), 3)
                                 for k in runs[0]}}))


if __name__ == "__main__":
    main()
