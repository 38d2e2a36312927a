"""A DLQ consumer of your own: alert when a rejection reason piles up.

Built on the reader API (``sharedstream.ops.dlq``): it reads a dead-letter topic up
to its current end without committing anything, counts distinct rejected
messages (copies of one rejection share an identity) per watcher and reason, and
prints an alert line for every (watcher, reason) seen at least ``--threshold``
times. Records written by another tool are counted apart, since they carry no
context. Replace ``alert`` with your pager or chat hook.

Run (connection as for ``sharedstream run``)::

    python examples/dlq_consumer.py orders.dlq --config examples/sharedstream.toml \
        --threshold 10 --since 1h
"""

from __future__ import annotations

import argparse
from collections import Counter
from datetime import UTC, datetime, timedelta

from sharedstream.kafka.connections import resolve_connection
from sharedstream.ops.dlq import DeadLetterError, read_dead_letters
from sharedstream.statestore.durations import parse_duration
from sharedstream.triggerer.config import load_config


def alert(watcher: str, reason: str, count: int, example: str) -> None:
    print(f"ALERT {watcher}: {count} message(s) rejected with {reason!r} (e.g. {example})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topic")
    parser.add_argument("--config", help="sharedstream.toml with [connections]")
    parser.add_argument("--connection", default="kafka_default")
    parser.add_argument("--threshold", type=int, default=10)
    parser.add_argument("--since", type=parse_duration, default=timedelta(hours=1),
                        help="how far back, e.g. 15m, 1h, 1d")
    args = parser.parse_args()

    connection = resolve_connection(args.connection, load_config(args.config).connections)
    since = datetime.now(UTC) - args.since
    seen: set[str] = set()
    counts: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], str] = {}
    foreign = 0
    try:
        for record in read_dead_letters(connection, args.topic, since=since):
            if record.origin is None:  # foreign: written by another tool
                foreign += 1
                continue
            if record.dedupe_key in seen:  # a copy written again after a crash
                continue
            seen.add(record.dedupe_key)
            where = f"{record.origin.topic}[{record.origin.partition}]@{record.origin.offset}"
            for watcher, reason in record.rejections.items():
                counts[watcher, reason] += 1
                examples.setdefault((watcher, reason), where)
    except DeadLetterError as exc:
        print(f"error: {exc}")
        return 1
    for (watcher, reason), count in counts.most_common():
        if count >= args.threshold:
            alert(watcher, reason, count, examples[watcher, reason])
    if foreign:
        print(f"{foreign} record(s) without sharedstream headers (written by another tool)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
