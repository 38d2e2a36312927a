"""Run watchers on the in-memory broker and a SQLite state store, and look at what they did.

The watchers run through the same engine as ``sharedstream run``: the shared-stream
manager, the Kafka adapter (on :class:`~sharedstream.kafka.memory.MemoryBroker`, which
behaves as librdkafka does: consumer groups, commits, dead-letter delivery reports),
the unit-of-work writer and the asset state store on a SQLite file in a temporary
directory. So a test sees real outcomes: events persisted with their state, a
rejection dead-lettered before its offset is committed, a failing message held and
handed out again after a backoff, ``max attempts`` turning into a rejection, a
replayed dead letter handed only to the watchers that rejected it.

Failures are injected where the filter reads its stream: ``send(..., fail=2)`` makes
the first two hand-outs of that message raise :class:`InjectedFailure` in each
watcher's filter, exactly as if the filter had raised on it (the attempt counts, the
message is held, then handed out again). A batch filter's call raises it when its batch
holds such a message: the engine splits the batch down to that message, as for a filter
of its own that raises, and every other message of the batch settles. A hand-out is a
message's delivery round (``KafkaMessage.delivery``) to a watcher, so the calls of one
split count once, as the engine counts attempts.

What the harness recorded stays readable after its block: the events and every asset's
state are read once as it exits (the SQLite file goes with the block), and the
deliveries, rejections and commits live in memory.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlalchemy as sa

from sharedstream.core.batch import MessageBatch
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.kafka.connections import consumer_group_id
from sharedstream.kafka.dlq_headers import REJECTIONS, REPLAY_COUNT, replay_headers
from sharedstream.kafka.memory import MemoryBroker
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset, asset_event
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.loading import LoadedWatcher, WatcherLoadError, check_assets
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.triggers.assets import Asset
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger
from sharedstream.uow.sink import DatabaseWorkSink

__all__ = ["Delivery", "Event", "InjectedFailure", "Rejection", "WatcherHarness"]

GROUP_ID = "sharedstream-testing"
# Fast defaults: a held message goes again within milliseconds, polling starts at once.
FAST = ManagerSettings(retry_backoff_initial=0.01, retry_backoff_max=0.05,
                       cohort_grace_period=0.0)


class InjectedFailure(RuntimeError):
    """What a watcher's filter raises on a message sent with ``fail=``."""


@dataclass(frozen=True, slots=True)
class Event:
    """An event persisted for ``watcher`` (of ``asset``) from the message at ``offset``."""

    watcher: str
    asset: str
    payload: Any
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Rejection:
    """A dead letter (or, without a ``dlq_topic``, a recorded rejection) of one message.

    ``reasons`` maps each rejecting watcher to its reason; ``dlq_offset`` is where the
    record is on the dead-letter topic (None when recorded in the database instead)."""

    topic: str
    partition: int
    offset: int
    reasons: Mapping[str, str]
    key: bytes | None
    value: bytes | None
    replay_count: int
    dlq_topic: str | None
    dlq_offset: int | None


@dataclass(frozen=True, slots=True)
class Delivery:
    """One hand-out of a message to a watcher: ``is_retry`` after a failure or a replay."""

    watcher: str
    topic: str
    partition: int
    offset: int
    is_retry: bool
    failed: bool  # an injected failure was raised on it


class WatcherHarness:
    """``async with WatcherHarness(assets=[...]) as h``: send, settle, then look.

    ``partitions`` is the partition count of every watched topic; ``settings`` the
    manager's (retries, ``max_attempts``, bounds), fast backoffs by default.
    """

    def __init__(self, assets: Iterable[Asset], *, partitions: int = 1,
                 settings: ManagerSettings = FAST) -> None:
        try:
            module = check_assets("harness assets", list(assets))
        except WatcherLoadError as exc:
            raise ValueError(str(exc)) from None
        self.settings = settings
        self._loaded = list(module.watchers())
        self._kafka = [w for w in self._loaded if isinstance(w.trigger, KafkaSharedStreamTrigger)]
        others = [w.name for w in self._loaded if w not in self._kafka]
        if others:
            raise ValueError(f"watchers {others}: the harness runs KafkaSharedStreamTrigger "
                             "watchers (and subclasses) only")
        self.broker = MemoryBroker()
        self._partitions: dict[str, int] = {}
        for loaded in self._kafka:
            trigger = self._trigger(loaded)
            for topic in trigger.topics:
                self._create(topic, partitions)
            if trigger.dlq_topic is not None:
                self._create(trigger.dlq_topic, 1)
        self.recorder = InMemoryRejectionRecorder()
        self.deliveries: list[Delivery] = []
        self._failures: dict[tuple[str, int, int], Counter[str]] = {}
        # (watcher, topic, partition, offset, delivery) -> whether that hand-out fails
        self._rounds: dict[tuple[str, str, int, int, int], bool] = {}
        self._final: tuple[list[Event], dict[str, dict[str, Any]]] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._store: StateStore | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._classes: list[tuple[KafkaSharedStreamTrigger, type]] = []
        self.manager: SharedStreamManager | None = None
        self.sink: DatabaseWorkSink | None = None

    @staticmethod
    def _trigger(loaded: LoadedWatcher) -> KafkaSharedStreamTrigger:
        trigger = loaded.trigger
        assert isinstance(trigger, KafkaSharedStreamTrigger)
        return trigger

    def _create(self, topic: str, partitions: int) -> None:
        if topic not in self._partitions:
            self.broker.create_topic(topic, partitions)
            self._partitions[topic] = partitions

    # -- running ------------------------------------------------------------------------

    async def __aenter__(self) -> WatcherHarness:
        self._tmp = tempfile.TemporaryDirectory(prefix="sharedstream-testing-")
        store = self._store = StateStore.from_url(f"sqlite:///{Path(self._tmp.name) / 'state.db'}")
        store.upgrade()
        by_asset = store.register_assets((w.asset.name, None) for w in self._loaded)
        asset_ids = {w.name: by_asset[w.asset.name] for w in self._loaded}
        self.sink = DatabaseWorkSink(store, asset_ids, ProcessSettings(uow_max_delay=0.0))
        self.manager = SharedStreamManager(self.sink, self.settings)
        groups: dict[Hashable, dict[str, Any]] = {}
        for loaded in self._kafka:
            groups.setdefault(loaded.trigger.shared_stream_key(), {})[loaded.name] = getattr(
                loaded.trigger, "match", None)
        for key, matches in groups.items():
            self.manager.declare_cohort(key, list(matches), matches)
        self.sink.start()
        for loaded in self._kafka:
            trigger = self._trigger(loaded)
            trigger.asset_state_store = WatcherStateAccess(store, loaded.name, loaded.asset,
                                                           asset_ids[loaded.name])
            self._classes.append((trigger, type(trigger)))
            trigger.__class__ = self._harnessed(type(trigger), loaded.name)
            self._tasks.append(asyncio.get_running_loop().create_task(
                self.manager.run_watcher(loaded.name, trigger), name=f"watcher {loaded.name}"))
        return self

    def _harnessed(self, cls: type[KafkaSharedStreamTrigger], watcher: str) -> type:
        """``cls`` with its producer on the memory broker and a tapped stream (or batch)."""
        harness = self
        base_filter = cls.filter_shared_stream
        base_batch = getattr(cls, "filter_shared_batch", None)

        def create_shared_stream_producer(_: type, kwargs: Mapping[str, Any]
                                          ) -> KafkaSharedStreamProducer:
            return KafkaSharedStreamProducer(
                topics=list(kwargs["topics"]), dlq_topic=kwargs.get("dlq_topic"),
                config=harness._connection(), recorder=harness.recorder,
                commit_interval=0.01, poll_timeout=0.01,
                consumer_factory=harness.broker.consumer,
                dlq_producer_factory=harness.broker.producer,
                topic_id_resolver=harness.broker.topic_ids, topic_id_check_interval=3600)

        async def filter_shared_stream(self: Any, stream: AsyncIterator[Any]
                                       ) -> AsyncIterator[Any]:
            async for event in base_filter(self, harness._tap(watcher, stream)):
                yield event

        async def filter_shared_batch(self: Any, batch: MessageBatch) -> None:
            harness._tap_batch(watcher, batch)
            assert base_batch is not None
            await base_batch(self, batch)

        members: dict[str, Any] = {
            "__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "create_shared_stream_producer": classmethod(create_shared_stream_producer),
            "filter_shared_stream": filter_shared_stream}
        if callable(base_batch):
            members["filter_shared_batch"] = filter_shared_batch
        return type(cls.__name__, (cls,), members)

    def _connection(self) -> dict[str, Any]:
        """The connection every group uses, with ``run``'s defaults (from the start,
        commits by the adapter only)."""
        return {"bootstrap.servers": "memory:9092", "group.id": GROUP_ID,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "statistics.interval.ms": 0}

    async def _tap(self, watcher: str, stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for message in stream:
            where = (message.topic, message.partition, message.offset)
            pending = self._failures.get(where)
            failing = pending is not None and pending[watcher] > 0
            self.deliveries.append(Delivery(watcher, *where, message.is_retry, failing))
            if failing:
                assert pending is not None
                pending[watcher] -= 1
                raise InjectedFailure(f"injected failure of {message.topic}"
                                      f"[{message.partition}]@{message.offset}")
            yield message

    def _tap_batch(self, watcher: str, batch: MessageBatch) -> None:
        """Record each message's hand-out once per delivery round, and raise
        :class:`InjectedFailure` when one of them is to fail in this round."""
        failing = None
        for message in batch:
            where = (message.topic, message.partition, message.offset)
            round_ = (watcher, *where, message.delivery)
            fails = self._rounds.get(round_)
            if fails is None:  # the round's first call (a split calls its halves again)
                pending = self._failures.get(where)
                fails = self._rounds[round_] = pending is not None and pending[watcher] > 0
                if fails:
                    assert pending is not None
                    pending[watcher] -= 1
                self.deliveries.append(Delivery(watcher, *where, message.is_retry, fails))
            if fails and failing is None:
                failing = message
        if failing is not None:
            raise InjectedFailure(f"injected failure of {failing.topic}"
                                  f"[{failing.partition}]@{failing.offset}")

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self.manager is not None and self.sink is not None:
                self.manager.pause_all()
                await self.sink.drain(last=True)
                await self.manager.stop_all()
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                await self.sink.aclose()
        finally:
            for trigger, cls in self._classes:
                trigger.__class__ = cls
            if self._store is not None:
                try:
                    self._final = (self._read_events(),
                                   {w.asset.name: self._read_state(w.asset.name)
                                    for w in self._loaded})
                finally:
                    self._store.close()
                    self._store = None
            if self._tmp is not None:
                self._tmp.cleanup()

    # -- input --------------------------------------------------------------------------

    def send(self, value: Any, *, topic: str | None = None, key: bytes | str | None = None,
             partition: int = 0, headers: Sequence[tuple[str, bytes | None]] | None = None,
             fail: int | Mapping[str, int] = 0) -> int:
        """Produce one message; its offset. ``value``: bytes (or None, a tombstone) as
        they are, a ``str`` as UTF-8, anything else as JSON. ``topic`` defaults to the
        only watched topic. ``fail``: how many hand-outs raise, for every watcher of
        the topic (an int) or per watcher name."""
        topic = topic if topic is not None else self._only_topic()
        if topic not in self._watched():
            raise ValueError(f"topic {topic!r} is not watched (watched: "
                             f"{', '.join(self._watched())})")
        count = self._partitions[topic]
        if not 0 <= partition < count:
            raise ValueError(f"partition {partition}: topic {topic!r} has partitions 0 to "
                             f"{count - 1} (WatcherHarness(partitions=N) gives it more)")
        data = value if value is None or isinstance(value, bytes) else (
            value.encode() if isinstance(value, str) else json.dumps(value).encode())
        raw_key = key.encode() if isinstance(key, str) else key
        offset = self.broker.produce(topic, data, raw_key, headers, partition)
        counts = fail if isinstance(fail, Mapping) else {
            w.name: fail for w in self._kafka if topic in self._trigger(w).topics}
        if any(counts.values()):
            self._failures[(topic, partition, offset)] = Counter(counts)
        return offset

    def _watched(self) -> list[str]:
        return sorted({t for w in self._kafka for t in self._trigger(w).topics})

    def _only_topic(self) -> str:
        watched = self._watched()
        if len(watched) != 1:
            raise ValueError(f"several topics are watched ({', '.join(watched)}): "
                             "name one with topic=")
        return watched[0]

    def replay(self, rejection: Rejection) -> int:
        """Replay a dead letter as ``sharedstream dlq replay --to <its topic>`` does: the
        record with its replay count bumped, onto the original topic and partition,
        handed only to the watchers that rejected it; the new offset. (``run`` reads
        replays from ``<dlq_topic>.replay``, which the in-memory broker cannot look up;
        what the watchers see is the same.)"""
        if rejection.dlq_topic is None or rejection.dlq_offset is None:
            raise ValueError("only a dead letter (a rejection on a dlq_topic) can be replayed")
        record = self.broker.records(rejection.dlq_topic)[rejection.dlq_offset]
        return self.broker.produce(rejection.topic, record.value(), record.key(),
                                   replay_headers(record.headers() or []),
                                   rejection.partition)

    async def settle(self, limit: float = 10.0) -> None:
        """Wait until every message sent so far is committed past by its group (every
        watcher done with it, events persisted, dead letters delivered). A message that
        stays held (it fails more often than it is retried) is reported by name."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while (pending := self.pending()):
            if loop.time() > deadline:
                raise TimeoutError(f"not committed after {limit:g}s: "
                                   + ", ".join(f"{t}[{p}] {c}/{e}"
                                               for (t, p), (c, e) in sorted(pending.items())))
            await asyncio.sleep(0.01)

    def pending(self) -> dict[tuple[str, int], tuple[int, int]]:
        """``{(topic, partition): (committed, end)}`` of what is not committed yet."""
        out = {}
        for loaded in self._kafka:
            trigger = self._trigger(loaded)
            group = consumer_group_id(self._connection(), trigger.topics)
            committed = self.broker.committed(group)
            for topic in trigger.topics:
                for partition, log in enumerate(self._logs(topic)):
                    done = committed.get((topic, partition), (0, ""))[0]
                    if done < log:
                        out[(topic, partition)] = (done, log)
        return out

    def _logs(self, topic: str) -> list[int]:
        return [len(self.broker.records(topic, p)) for p in range(self._partitions[topic])]

    # -- output -------------------------------------------------------------------------

    @property
    def store(self) -> StateStore:
        """The running harness's state store (gone after its block: read the events and
        the state with :meth:`events` and :meth:`state`, which keep them)."""
        if self._store is None:
            raise RuntimeError("the harness is not running (use `async with`; after the "
                               "block, events() and state() still answer)")
        return self._store

    def events(self, watcher: str | None = None) -> list[Event]:
        """The persisted events (of one watcher, or all), in commit order; after the
        block, those persisted by its end."""
        found = self._final[0] if self._final is not None else self._read_events()
        return [e for e in found if watcher is None or e.watcher == watcher]

    def _read_events(self) -> list[Event]:
        query = (sa.select(asset_event.c.watcher, asset.c.name, asset_event.c.payload,
                           asset_event.c.partition, asset_event.c.offset)
                 .join(asset, asset.c.id == asset_event.c.asset_id)
                 .order_by(asset_event.c.id))
        with self.store.engine.connect() as connection:
            rows = connection.execute(query).all()
        return [Event(r.watcher, r.name, json.loads(r.payload), r.partition, r.offset)
                for r in rows]

    def rejections(self) -> list[Rejection]:
        """Every dead letter on the dead-letter topics, then the rejections recorded in
        the database for watchers without one."""
        out: list[Rejection] = []
        for dlq in sorted({t.dlq_topic for t in map(self._trigger, self._kafka)
                           if t.dlq_topic is not None}):
            for record in self.broker.records(dlq):
                headers = dict(record.headers() or [])
                origin = {k: (v or b"").decode() for k, v in headers.items()}
                out.append(Rejection(
                    topic=origin.get("sharedstream.original.topic", ""),
                    partition=int(origin.get("sharedstream.original.partition", "-1")),
                    offset=int(origin.get("sharedstream.original.offset", "-1")),
                    reasons=json.loads(origin.get(REJECTIONS, "{}")),
                    key=record.key(), value=record.value(),
                    replay_count=int(origin.get(REPLAY_COUNT, "0")),
                    dlq_topic=dlq, dlq_offset=record.offset()))
        for row in self.recorder.rows.values():
            out.append(Rejection(row.origin.topic, row.origin.partition, row.origin.offset,
                                 dict(row.rejections), row.key, row.value, 0, None, None))
        return out

    def state(self, asset_name: str) -> dict[str, Any]:
        """The asset's committed state, key by key (after the block, as it ended)."""
        if self._final is not None:
            return dict(self._final[1].get(asset_name, {}))
        return self._read_state(asset_name)

    def _read_state(self, asset_name: str) -> dict[str, Any]:
        return {e.key: e.value for e in self.store.asset(AssetScope(name=asset_name)).items()}

    def committed(self) -> dict[tuple[str, int], int]:
        """Each group's committed offset per partition: what was acknowledged."""
        out: dict[tuple[str, int], int] = {}
        for loaded in self._kafka:
            group = consumer_group_id(self._connection(), self._trigger(loaded).topics)
            out.update({k: v[0] for k, v in self.broker.committed(group).items()})
        return out

    def attempts(self, offset: int, *, topic: str | None = None, partition: int = 0
                 ) -> Counter[str]:
        """How many times each watcher was handed the message at ``offset``."""
        topic = topic if topic is not None else self._only_topic()
        return Counter(d.watcher for d in self.deliveries
                       if (d.topic, d.partition, d.offset) == (topic, partition, offset))

