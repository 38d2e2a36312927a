"""A sample orders feed for ``examples/orders_watchers.py``: JSON orders, a few poison ones.

Writes to the topic ``orders`` (which must exist: sharedstream never creates topics),
one message every ``--interval`` seconds, forever or ``--count`` messages. Of every
ten messages:

* eight are well-formed orders, ``{"id": 42, "status": "paid", "amount": 19.5}``:
  five ``"paid"``, three ``"new"``;
* one lacks ``amount`` and one is not JSON: ``valid_orders`` dead-letters both to
  ``orders.dlq``, each with its reason.

Ids grow by one per message, so they grow within every partition too (the watermark of
``paid_orders`` relies on it). By default the first id is the clock (Unix seconds), so
a producer restarted against the same topic and database carries on above the ids it
already wrote, at one message a second or slower; ``--first-id`` sets it.

The broker comes from ``$KAFKA_BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``, the
broker of ``examples/sharedstream.toml``). Run it next to the triggerer::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/produce_orders.py --count 20

``--heartbeat PATH`` touches PATH after each acknowledged message: docker-compose's
health check of the producer looks at its age.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from itertools import count
from pathlib import Path
from types import FrameType

from confluent_kafka import KafkaError, Message, Producer

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def order(index: int, order_id: int) -> bytes:
    """Message ``index`` of the feed (the pattern repeats every ten), with id ``order_id``."""
    if index % 10 == 9:
        return f"not json: order {order_id}".encode()
    if index % 10 == 4:
        return json.dumps({"id": order_id, "status": "paid"}).encode()  # no amount
    status = "new" if index % 10 in (2, 5, 7) else "paid"
    amount = 5.0 + (order_id % 20) * 2.5
    return json.dumps({"id": order_id, "status": status, "amount": amount}).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--count", type=int, default=0,
                        help="messages to write, then exit (default 0: forever)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between two messages (default 1.0)")
    parser.add_argument("--first-id", type=int, default=None,
                        help="id of the first message (default: the clock, in Unix seconds)")
    parser.add_argument("--heartbeat", type=Path, default=None,
                        help="a file touched after each acknowledged message")
    args = parser.parse_args(argv)

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "client.id": "sharedstream-sample-producer"})
    first_id = args.first_id if args.first_id is not None else int(time.time())
    stopping = False
    failures = 0

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def delivered(error: KafkaError | None, message: Message) -> None:
        nonlocal failures
        if error is not None:
            failures += 1
            print(f"not delivered: {error}", file=sys.stderr, flush=True)
            return
        print(f"produced {args.topic}[{message.partition()}]@{message.offset()}: "
              f"{message.value().decode(errors='replace')}", flush=True)
        if args.heartbeat is not None:
            args.heartbeat.touch()

    print(f"producing to {args.topic} on {bootstrap}, one message every {args.interval}s",
          flush=True)
    for index in count():
        if stopping or (args.count and index >= args.count):
            break
        producer.produce(args.topic, order(index, first_id + index), on_delivery=delivered)
        deadline = time.monotonic() + args.interval
        while not stopping:
            producer.poll(max(0.0, min(0.2, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                break
    left = producer.flush(30)
    if left or failures:
        print(f"error: {failures} message(s) not delivered, {left} still queued",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
