"""Issue 42's reference: a hand-written confluent-kafka router, what a user writes instead.

    python bench/router_consumer.py BOOTSTRAP TOPIC MESSAGES HANDLERS GROUP CONFIG_JSON

Imports nothing of sharedstream or of the bench package, so its start-up is a plain
consumer's own. One consumer in group GROUP reads TOPIC (keyed ``0``..``HANDLERS-1``) to
its end; each message goes to its key's handler by one dict lookup, and the handler
parses the value with ``json.loads`` and keeps nothing (what each watcher of
``bench/watchers_scale.py`` does with its own key). Each batch is committed
asynchronously and the end synchronously. Prints the wall-clock and process CPU times
of the first and the last message handled and its peak RSS, as JSON; the bench reads
its commits from outside.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException


def handler() -> Callable[[Any], None]:
    def handle(message: Any) -> None:
        json.loads(message.value())
    return handle


def main(bootstrap: str, topic: str, messages: str, handlers: str, group: str,
         config: str) -> None:
    route = {str(i).encode(): handler() for i in range(int(handlers))}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **json.loads(config)})
    consumer.subscribe([topic])
    seen, total = 0, int(messages)
    first = last = cpu_first = cpu_last = 0.0
    while seen < total:
        batch = consumer.consume(num_messages=1000, timeout=1.0)
        if batch and not first:
            first, cpu_first = time.time(), time.process_time()
        for m in batch:
            if m.error() is None:
                seen += 1
                found = route.get(m.key())
                if found is not None:
                    found(m)
        if batch:
            last, cpu_last = time.time(), time.process_time()
            consumer.commit(asynchronous=True)
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:  # the batches' own async commits got there first
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"first": first, "last": last, "cpu_first": cpu_first,
                      "cpu_last": cpu_last, "rss_mb": rss_mb}), flush=True)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
