"""The plain reference of the process runs: a hand-written confluent-kafka consumer process.

    python bench/plain_consumer.py BOOTSTRAP TOPIC MESSAGES CONSUMERS KEEP CONFIG_JSON [GROUP]

Imports nothing of sharedstream or of the bench package, so its start-up is a plain
consumer's own. CONSUMERS threads, each its own consumer group (``GROUP.<i>`` when GROUP
is given, else a new one), consume TOPIC to its end (MESSAGES records over 3 partitions,
the JSON of ``bench/decode_once.py``), parse every value and look up its status, keep
the paid 1% when KEEP is 1, commit each batch
asynchronously and the end synchronously, then check the committed offsets. Prints the
wall-clock times of the first delivered message and of the last commit's answer, and the
process's CPU seconds at that point, as JSON.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

PARTITIONS = 3


def consume(bootstrap: str, topic: str, messages: int, keep: bool, config: dict[str, Any],
            first: list[float], group: str) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **config})
    consumer.subscribe([topic])
    seen = 0
    kept: list[dict[str, Any]] = []
    while seen < messages:
        batch = consumer.consume(num_messages=1000, timeout=1.0)
        if batch and not first:
            first.append(time.time())
        for m in batch:
            if m.error() is None:
                seen += 1
                order = json.loads(m.value())
                if order["status"] == "paid" and keep:
                    kept.append({"offset": m.offset()})
        if batch:
            consumer.commit(asynchronous=True)
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:  # the batches' own async commits got there first
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise
    committed = time.time()
    offsets = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.close()
    if sum(tp.offset for tp in offsets) != messages:
        raise RuntimeError(f"final commit did not reach the end: {offsets}")
    return committed


def main(bootstrap: str, topic: str, messages: str, consumers: str, keep: str,
         config: str, group: str = "") -> None:
    firsts: list[list[float]] = [[] for _ in range(int(consumers))]
    ends = [0.0] * len(firsts)

    def run(i: int) -> None:
        ends[i] = consume(bootstrap, topic, int(messages), keep == "1", json.loads(config),
                          firsts[i], f"{group}.{i}" if group else uuid.uuid4().hex)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(firsts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not all(ends):
        raise SystemExit("error: a consumer thread failed (see above)")
    print(json.dumps({"first": min(f[0] for f in firsts), "committed": max(ends),
                      "cpu_s": time.process_time()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
