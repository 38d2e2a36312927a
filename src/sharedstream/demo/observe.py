"""What the demo's view shows, read the way an operator would: from the outside.

Events and watermarks come from the database (a separate engine: the simulated
outage hits only the triggerer's), committed offsets from the broker for the
triggerer's consumer group, dead letters from the dead-letter topic with a plain
consumer on manual assignment. Nothing here asks the triggerer what it believes it
did, so the view shows what actually landed. Only the in-memory counts (held,
in flight) and database health come from the triggerer itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from sqlalchemy import func, select

from sharedstream.ops.dlq.reader import DeadLetter, decode_record
from sharedstream.statestore.engine import make_engine
from sharedstream.statestore.models import asset, asset_event, asset_state_store


@dataclass(frozen=True, slots=True)
class TriggererState:
    """The triggerer's own view: in-memory work and database health."""

    in_flight: int = 0
    queued: int = 0
    held: int = 0
    assigned: int = 0
    database_healthy: bool = True
    database_error: str | None = None
    failed_commits: int = 0


@dataclass(slots=True)
class DemoSnapshot:
    """One refresh of the view."""

    elapsed: float
    produced: dict[int, int]
    committed: dict[int, int | None]
    events: dict[str, int]
    watermarks: dict[str, dict[str, Any]]
    dead_letters: list[DeadLetter]
    triggerer: TriggererState
    outage: str
    poison_sent: int
    replay: str = ""


class Observer:
    """Reads events, watermarks, commits and dead letters; one instance per demo run."""

    def __init__(self, bootstrap: str, database_url: str, topic: str, partitions: int,
                 dlq_topic: str, consumer_group: str) -> None:
        self.topic = topic
        self.partitions = partitions
        self._engine = make_engine(database_url)
        # Same group id, never subscribed: it only asks the coordinator for the
        # group's committed offsets and does not join (or disturb) the group.
        self._offsets = Consumer({"bootstrap.servers": bootstrap, "group.id": consumer_group,
                                  "enable.auto.commit": False, "log_level": 0})
        self._dlq = Consumer({"bootstrap.servers": bootstrap, "group.id": "sharedstream-demo-view",
                              "enable.auto.commit": False, "log_level": 0})
        self._dlq.assign([TopicPartition(dlq_topic, p, OFFSET_BEGINNING)
                          for p in range(partitions)])
        self.dead_letters: list[DeadLetter] = []

    def close(self) -> None:
        self._offsets.close()
        self._dlq.close()
        self._engine.dispose()

    def events(self) -> dict[str, int]:
        """Persisted events per asset."""
        query = (select(asset.c.name, func.count(asset_event.c.id))
                 .select_from(asset.outerjoin(asset_event, asset_event.c.asset_id == asset.c.id))
                 .group_by(asset.c.name).order_by(asset.c.name))
        with self._engine.connect() as connection:
            return {name: count for name, count in connection.execute(query)}

    def watermarks(self) -> dict[str, dict[str, Any]]:
        """Asset state rows: ``{asset: {key: value}}``."""
        query = (select(asset.c.name, asset_state_store.c.key, asset_state_store.c.value)
                 .join(asset, asset.c.id == asset_state_store.c.asset_id)
                 .order_by(asset.c.name, asset_state_store.c.key))
        out: dict[str, dict[str, Any]] = {}
        with self._engine.connect() as connection:
            for name, key, value in connection.execute(query):
                out.setdefault(name, {})[key] = json.loads(value)
        return out

    def event_payloads(self, watcher: str) -> list[tuple[int, Any]]:
        """``(partition, payload)`` of every event ``watcher`` persisted."""
        query = select(asset_event.c.partition, asset_event.c.payload).where(
            asset_event.c.watcher == watcher)
        with self._engine.connect() as connection:
            return [(p, json.loads(v)) for p, v in connection.execute(query)]

    def committed(self, timeout: float = 2.0) -> dict[int, int | None]:
        """The group's committed offset per partition (None: nothing committed yet)."""
        wanted = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        result = self._offsets.committed(wanted, timeout=timeout)
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in result}

    def replays_pending(self, replay_topic: str, timeout: float = 2.0) -> int:
        """Records of ``replay_topic`` the group has not committed past yet."""
        wanted = [TopicPartition(replay_topic, p) for p in range(self.partitions)]
        committed = self._offsets.committed(wanted, timeout=timeout)
        ends = [self._offsets.get_watermark_offsets(tp, timeout=timeout)[1] for tp in wanted]
        return sum(end - max(tp.offset, 0) for tp, end in zip(committed, ends, strict=True))

    def read_dead_letters(self) -> list[DeadLetter]:
        """Every dead-letter record so far (new ones are read without waiting)."""
        while records := self._dlq.consume(num_messages=100, timeout=0):
            for record in records:
                if record.error() is not None:
                    continue
                letter = decode_record(record)
                if not letter.foreign:
                    self.dead_letters.append(letter)
        return self.dead_letters
