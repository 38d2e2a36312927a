"""Decode once: N watchers parsing every message's JSON, each on its own or shared.

The manager path of ``bench/manager_overhead.py`` (in-memory batches, a sink that
confirms at once), with a realistic value (~120 bytes of JSON) and watchers that parse
it and keep 1% by a field. ``loads``: each watcher calls ``json.loads(msg.value)``, as
filters had to before; ``shared``: each reads ``msg.json``, parsed by the first asker
and kept on the message for the others. Run:

    python bench/decode_once.py [--messages N] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping
from typing import Any

from bench.manager_overhead import BATCH, PARTITIONS, BenchStream, timed_run

from sharedstream.core.message import KafkaMessage
from sharedstream.testing.memorystream import LocalRecord
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent


def value(i: int) -> bytes:
    return json.dumps({"id": i, "status": "paid" if i % 100 == 0 else "open",
                       "amount": i * 0.25, "customer": f"c-{i % 977:04d}",
                       "items": [i % 7, i % 11, i % 13]}).encode()


def batches(total: int) -> list[list[tuple[KafkaMessage, LocalRecord]]]:
    """Fresh messages (no decode kept from an earlier run), built before the clock starts."""
    return [[(KafkaMessage("t", i % PARTITIONS, i, 0, None, value(i)),
              LocalRecord(str(i % PARTITIONS), i // PARTITIONS))
             for i in range(start, min(start + BATCH, total))]
            for start in range(0, total, BATCH)]


class JsonStream(BenchStream):
    prepared: list[list[tuple[KafkaMessage, LocalRecord]]] = []

    def __init__(self, total: int) -> None:
        super().__init__(0)  # BenchStream's own b"x" batches: none
        prepared, JsonStream.prepared = JsonStream.prepared, []
        # Handed out and forgotten, as a consumer does: a message (and what was decoded
        # from it) lives only while the manager holds it.
        self._batches = _draining(prepared)  # type: ignore[assignment]


def _draining(prepared: list[list[tuple[KafkaMessage, LocalRecord]]]
              ) -> Iterator[list[tuple[KafkaMessage, LocalRecord]]]:
    prepared.reverse()
    while prepared:
        yield prepared.pop()


class ParsingTrigger(BaseEventTrigger):
    total = 0

    def __init__(self, shared: bool) -> None:
        self.shared = shared

    def shared_stream_key(self) -> Hashable:
        return "bench"

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "bench.ParsingTrigger", {"shared": self.shared}

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> JsonStream:
        return JsonStream(cls.total)

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        if self.shared:
            async for message in stream:
                if message.json["status"] == "paid":
                    yield TriggerEvent(message.offset)
        else:
            async for message in stream:
                assert message.value is not None
                if json.loads(message.value)["status"] == "paid":
                    yield TriggerEvent(message.offset)


async def run_once(watchers: int, messages: int, shared: bool) -> float:
    ParsingTrigger.total = messages
    JsonStream.prepared = batches(messages)
    return await timed_run(watchers, messages, lambda: ParsingTrigger(shared))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    tune_gc()
    results = []
    for watchers in (1, 10, 100):
        messages = max(2_000, args.messages // watchers)
        row: dict[str, Any] = {"watchers": watchers, "messages": messages}
        for mode in ("loads", "shared"):
            best = min(asyncio.run(run_once(watchers, messages, mode == "shared"))
                       for _ in range(3))
            row[f"{mode}_us_per_delivery"] = round(best / messages / watchers * 1e6, 3)
        row["speedup"] = round(row["loads_us_per_delivery"] / row["shared_us_per_delivery"], 2)
        results.append(row)
        print(f"watchers={watchers:>3} loads {row['loads_us_per_delivery']:6.2f} us/delivery  "
              f"shared {row['shared_us_per_delivery']:6.2f} us/delivery  x{row['speedup']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
