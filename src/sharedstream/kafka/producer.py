"""``KafkaSharedStreamProducer``: one Kafka consumer for one shared-stream group.

Threads: a dedicated consumer thread owns the ``Consumer`` (batch ``consume()``,
rebalance callbacks, coalesced commits, dead-letter delivery reports). It keeps no
per-message state: it wraps what it reads and hands each batch to the event loop in
one hop, and it applies what the loop publishes (per-partition pauses and seeks,
commit targets). The event loop owns the lanes, the only per-offset bookkeeping on
this side: it admits records, resolves outcomes, decides the bounds, and every
``commit_interval`` publishes the commit targets of the lanes that changed (the
commit tick costs what changed, not what is held). The two sides share only small
hand-off dicts under one lock, touched once per batch or tick, never per message.

Failure windows:

* Crash after a message was handed out, before its outcome is committed: the
  broker still has the old committed offset; the message is read again. Terminal
  offsets above the commit are carried in commit metadata, so only messages
  resolved within the last commit interval (100 ms) are handed out again.
* Crash after a dead-letter record was delivered, before the commit: the record
  is produced again after restart (duplicate, same identity header).
* Crash after the rejection recorder stored a row, before the commit: the row is
  recorded again (recorders are idempotent by identity).
* Revocation: the watchers first finish what they were handed of the revoked
  partitions (at most ``revoke_timeout / 2``; held messages are not waited for: what
  is still open then is handed out again by the next owner), pending dead-letter
  reports are awaited (``revoke_timeout``), the
  loop is asked to publish its targets (bounded wait: a loop that does not answer
  costs re-reading what resolved in the last commit interval), and the revoked
  partitions' targets the broker has not confirmed are committed synchronously
  before the partitions go, even when an asynchronous commit of them is still in
  flight (a rebalance can get it refused after the partitions went). A refusal the
  member cannot outlive inside the callback (the group moved to a generation it has
  not joined yet) is logged as a warning and counted (``revoke_commit_failures``):
  the next owner hands out again what resolved since the last confirmed commit.
  Outcomes arriving later belong to an old generation and are dropped. A lost
  partition commits nothing (another member may own it).
* Close: the final commit is confirmed before the member leaves, serving a
  rebalance that overtakes it (:meth:`_final_commit`), within ``revoke_timeout``.
* A watched or dead-letter topic recreated under the consumer: noticed by the
  periodic topic-id check (``TOPIC_ID_CHECK_S``); see :meth:`_check_topic_ids`.

Bounds: a lane pauses its partition at ``max_in_flight`` offsets read above its floor
or ``max_in_flight_bytes`` of unresolved payload (:meth:`bound_lanes`), so a held
message costs a bounded amount of memory, never the rest of the log. The loop
decides, so the consumer may have read a few batches further before the pause
lands: the lane discards those and the consumer seeks back to them on resume.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from sharedstream.core.backoff import Backoff, exponential, jittered
from sharedstream.core.contract import (
    LaneRewound,
    LanesEnded,
    LanesStarted,
    Records,
    SharedStreamProducer,
    StreamEvent,
)
from sharedstream.core.ledger import Key, LaneLoad, Ledger, PartitionLedger, Target
from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.connections import (
    consumer_group_id,
    producer_config,
    validate_connection,
)
from sharedstream.kafka.dead_letters import DeadLetterSender, is_permanent
from sharedstream.kafka.logs import LIBRDKAFKA_LOGGER
from sharedstream.kafka.payload import KafkaPayload, build_payload
from sharedstream.kafka.progress import DEFAULT_MAX_CHARS, decode_progress, encode_progress
from sharedstream.kafka.rejections import RejectedMessage, RejectionRecorder
from sharedstream.kafka.replay_topic import ensure_replay_topic
from sharedstream.kafka.stats import STATS_INTERVAL_MS, PartitionStats, partition_stats
from sharedstream.kafka.topic_ids import TopicIdResolver, describe_topic_ids

log = logging.getLogger(__name__)

Item = tuple[KafkaMessage, KafkaPayload]
MAX_DLQ_BACKOFF_S = 30.0
PROBE_INTERVAL_S = 5.0
# How often the watched topics' ids are compared with the broker's: a topic deleted and
# recreated under a running consumer keeps its partitions assigned, and librdkafka goes
# on fetching at the old position without telling the application (see _check_topic_ids).
TOPIC_ID_CHECK_S = 5.0
METADATA_REFRESH_MS = 5000
# Commit answers that mean "a rebalance overtook this request", retried afterwards.
_REBALANCE_ERRORS = frozenset(
    {KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID}
)
# First pause before a revocation's commit is sent again after another kind of failure.
REVOKE_RETRY_S = 0.1
SETTLE_POLL_S = 0.005  # how often a revoke looks whether the watchers are done


class StreamNotOpenError(RuntimeError):
    """A broker operation was asked for while no consumer is open."""


class StreamFailedError(RuntimeError):
    """The group's consumer hit a fatal error; the manager evicts the group."""


@dataclass(frozen=True, slots=True)
class ProducerHealth:
    """A snapshot for ``/readyz`` and metrics."""

    ready: bool
    consumer_group: str
    assigned_partitions: int
    held_messages: int
    paused: bool
    last_error: str | None
    failed: str | None


# From the consumer thread to the loop, in order; None when the consumer failed.
_Handoff = StreamEvent[KafkaPayload] | None


class KafkaSharedStreamProducer(SharedStreamProducer[KafkaPayload]):
    """Broker side of one Kafka shared-stream group (see module docstring).

    ``config`` is a connection config (:func:`resolve_connection`); it is
    validated again here so no consumer can exist with auto-commit on. The
    consumer group is ``<group.id>.<sorted topics joined by +>``.
    """

    def __init__(
        self,
        *,
        topics: Sequence[str],
        config: Mapping[str, Any],
        recorder: RejectionRecorder | None,
        connection_id: str = "kafka_default",
        dlq_topic: str | None = None,
        replay_topic: str | None = None,
        poll_timeout: float = 1.0,
        batch_size: int = 1000,
        commit_interval: float = 0.1,
        revoke_timeout: float = 10.0,
        max_queued_batches: int = 8,
        pause_after: float = 1.0,
        consumer_factory: Callable[[dict[str, Any]], Any] = Consumer,
        dlq_producer_factory: Callable[[dict[str, Any]], Any] = Producer,
        topic_id_resolver: TopicIdResolver = describe_topic_ids,
        topic_id_check_interval: float = TOPIC_ID_CHECK_S,
    ) -> None:
        self.topics = tuple(sorted(set(topics)))
        if not self.topics:
            raise ValueError("a shared-stream producer needs at least one topic")
        self.connection_id = connection_id
        self._config = validate_connection(connection_id, config)
        self.consumer_group = consumer_group_id(self._config, self.topics)
        # Every line names the group; --log-format json carries it as a field too.
        self._log = logging.LoggerAdapter(log, {"group": self.consumer_group})
        self.dlq_topic = dlq_topic
        # Read besides the watched topics, never part of the consumer group's name: the
        # replays of this group's dead letters (kafka/replay_topic.py).
        self.replay_topic = replay_topic
        self._read_topics = self.topics if replay_topic is None else (*self.topics, replay_topic)
        self._recorder = recorder
        self._consume_timeout = max(0.001, min(poll_timeout, commit_interval))
        self._batch_size = batch_size
        self._commit_interval = commit_interval
        self._revoke_timeout = revoke_timeout
        self._max_queued = max_queued_batches
        self._consumer_factory = consumer_factory
        self._dlq_producer_factory = dlq_producer_factory
        self._topic_id_resolver = topic_id_resolver
        self._id_check_interval = topic_id_check_interval
        protocol = str(self._config.get("group.protocol", "classic")).lower()
        strategy = str(self._config.get("partition.assignment.strategy", "cooperative-sticky"))
        self._incremental = protocol == "consumer" or "cooperative" in strategy

        # Guards only the hand-off between the two threads: ``_queued``,
        # ``_published`` and ``_lane_requests``.
        self._lock = threading.Lock()
        # The group's partition ledger (given to open_stream): its per-partition snapshot
        # is what health and metrics, on other threads, read; revocation and close read
        # its commit targets on the loop.
        self._ledger: Ledger | None = None
        # Hand-off, loop -> thread: commit targets (generation, offset, terminal offsets
        # above) and per-partition fetch requests (generation, None = pause, or the
        # offset to seek to before resuming).
        self._published: dict[Key, tuple[int, int, tuple[int, ...]]] = {}
        self._lane_requests: dict[Key, tuple[int, int | None]] = {}
        # Thread side: the generation of each owned partition, the partitions paused for
        # their bound, and commit bookkeeping (latest target, last sent, last the broker
        # confirmed, still to send).
        self._owned: dict[Key, int] = {}
        self._bounded: set[Key] = set()
        self._latest: dict[Key, tuple[int, int, tuple[int, ...]]] = {}
        self._sent: dict[Key, tuple[int, str]] = {}
        self._confirmed: dict[Key, tuple[int, str]] = {}
        self._unsent: set[Key] = set()
        self._generation = 0
        self._queued = 0
        self._topic_ids: dict[str, str] = {}
        self._metadata_max_chars = DEFAULT_MAX_CHARS

        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Handoff] = asyncio.Queue()
        # Set when the loop took a batch or asked to resume: the consumer thread waits
        # on it instead of pausing the partitions (see _hold_back).
        self._room = threading.Event()
        self._blocked_since: float | None = None
        self._pause_after = pause_after
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._dlq: DeadLetterSender | None = None
        self._commands: queue.SimpleQueue[
            tuple[Callable[[Any], Any], concurrent.futures.Future[Any]]
        ] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._pause_requested = False
        self._applied_pause = False
        self._opened = False
        self._closed = False
        self._ready = False
        self._last_error: str | None = None
        self._failure: BaseException | None = None
        self._to_record: list[tuple[Callable[[], None], RejectedMessage]] = []
        self._record_wakeup = asyncio.Event()
        self._recorder_idle = asyncio.Event()
        self._recorder_idle.set()
        self._recorder_task: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        # Metrics: plain integers, read by the metrics collector at scrape time.
        self.consumed = 0
        self.commits = 0
        self.commit_failures = 0
        # Partitions that went (revoked, closed) before the broker confirmed the commit
        # of what they resolved: their next owner hands that out again.
        self.revoke_commit_failures = 0
        self.dead_letters = 0
        self.dead_letter_failures = 0
        self.rejections_recorded = 0
        self.topics_recreated = 0
        self._id_check: concurrent.futures.Future[dict[str, str]] | None = None
        self._next_id_check = 0.0
        self._dlq_mark = 0
        self.partition_stats: dict[tuple[str, int], PartitionStats] = {}

    # ----------------------------------------------------------------- contract

    async def open_stream(self, ledger: Ledger) -> AsyncIterator[StreamEvent[KafkaPayload]]:
        """Start the consumer thread; yield one :class:`Records` per ``consume()`` and the
        partitions' starts, ends and rewinds, in the order the consumer saw them.

        Topic ids are resolved first: an event identity without its topic id
        could not tell a recreated topic from the old one (guarantee 2).
        """
        if self._opened:
            raise RuntimeError("open_stream() may be called once per producer")
        self._opened = True
        self._ledger = ledger
        self._loop = asyncio.get_running_loop()
        if self.replay_topic is not None and self.dlq_topic is not None:
            await asyncio.to_thread(ensure_replay_topic, self._config, self.dlq_topic)
        # The DLQ topic's id too: its recreation is watched like a watched topic's.
        watched = self._read_topics if self.dlq_topic is None else (*self._read_topics,
                                                                     self.dlq_topic)
        self._topic_ids = await asyncio.to_thread(
            self._topic_id_resolver, self._config, watched
        )
        if self.dlq_topic is not None:
            # No local: this frame lives as long as the stream, and the sender alone must
            # hold the producer so that closing it destroys it (DeadLetterSender.close).
            self._dlq = DeadLetterSender(
                self._dlq_producer_factory(producer_config(self._config)),
                self.dlq_topic, self.consumer_group)
        self._recorder_task = asyncio.create_task(self._recorder_loop())
        self._thread = threading.Thread(
            target=self._thread_main, name=f"sharedstream:{self.consumer_group}", daemon=True
        )
        self._thread.start()
        self._log.info("shared stream %s: consumer group %s", self.connection_id,
                       self.consumer_group)
        while True:
            yield await self._next_item()

    async def _next_item(self) -> StreamEvent[KafkaPayload]:
        item = await self._queue.get()
        if item is None:
            failure = self._failure
            raise StreamFailedError(f"consumer group {self.consumer_group} failed") from failure
        if isinstance(item, Records):
            with self._lock:
                self._queued -= 1
            self._room.set()
            self.consumed += len(item.items)
        return item

    def request_fetch(self, key: Key, generation: int, seek_to: int | None) -> None:
        with self._lock:
            self._lane_requests[key] = (generation, seek_to)

    def publish(self, targets: Mapping[Key, Target]) -> None:
        with self._lock:
            self._published.update(targets)

    def _take_targets(self) -> None:
        """Loop: publish the ledger's targets now (revocation, close, ``commit()``)."""
        if self._ledger is not None:
            targets = self._ledger.publish()
            if targets:
                self.publish(targets)

    def _publish_and_signal(self, done: threading.Event) -> None:
        self._take_targets()
        done.set()

    def _settle_and_signal(self, keys: frozenset[Key], until: float,
                           done: threading.Event) -> None:
        """Loop: once the watchers have resolved what they were handed of ``keys`` (or at
        ``until``), publish the targets and signal the consumer thread."""
        loop, ledger = self._loop, self._ledger
        if (loop is not None and ledger is not None and time.monotonic() < until
                and ledger.handed_out(keys)):
            loop.call_later(SETTLE_POLL_S, self._settle_and_signal, keys, until, done)
            return
        self._publish_and_signal(done)

    def _settle_with_loop(self, keys: frozenset[Key], timeout: float) -> None:
        """Consumer thread, at revoke: let the watchers finish what they were handed of
        the revoked partitions, for at most half of ``timeout``, so the commit covers it
        and the next owner does not hand it out again. Held messages are not waited for
        (they wait for a retry time); what is still open at the bound goes to the next
        owner, as documented (docs/guarantees.md, "Revocation and close")."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running() or not keys:
            return
        done = threading.Event()
        loop.call_soon_threadsafe(self._settle_and_signal, keys,
                                  time.monotonic() + timeout / 2, done)
        if not done.wait(timeout):
            self._log.warning("%s: the event loop did not settle within %.1fs",
                              self.consumer_group, timeout)

    def _sync_with_loop(self, timeout: float) -> None:
        """Consumer thread: let the loop take what happened so far and publish it.

        Dead-letter reports delivered just before (``flush``) reach the loop first (one
        FIFO of callbacks), so what they made terminal is in the published targets.
        """
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return
        done = threading.Event()
        loop.call_soon_threadsafe(self._publish_and_signal, done)
        if not done.wait(timeout):
            self._log.warning("%s: the event loop did not publish within %.1fs; committing what "
                        "it published before", self.consumer_group, timeout)

    def dead_letter(self, payload: KafkaPayload, rejections: dict[str, str],
                    done: Callable[[], None]) -> None:
        """Produce the dead letter, retrying with backoff; a record the topic refuses for
        good (too large, for instance) goes to the rejection recorder instead."""
        if self._dlq is None:
            self._enqueue_record(payload, rejections, "no dead-letter topic configured", done)
            return
        loop = self._require_loop()
        attempt = [0]

        def reported(error: KafkaError | None) -> None:
            # Runs on the consumer thread (poll/flush) or inline on the loop (produce refused).
            if error is None:
                self.dead_letters += 1
                loop.call_soon_threadsafe(done)
            elif is_permanent(error):
                loop.call_soon_threadsafe(self._enqueue_record, payload, rejections,
                                          f"dead-letter refused: {error.str()}", done)
            else:
                attempt[0] += 1
                self.dead_letter_failures += 1
                self._note_error(f"dead-letter delivery failed: {error.str()}")
                delay = jittered(exponential(attempt[0], 0.2, MAX_DLQ_BACKOFF_S))
                loop.call_soon_threadsafe(self._schedule, loop, delay, resend)

        def resend() -> None:
            if self._ledger is None or not self._ledger.delivering(payload):
                return
            assert self._dlq is not None
            self._dlq.send(payload, rejections, reported)

        self._dlq.send(payload, rejections, reported)

    def size(self, raw: KafkaMessage) -> int:
        return len(raw.value or b"") + len(raw.key or b"")

    def pause(self) -> None:
        self._pause_requested = True

    def resume(self) -> None:
        self._pause_requested = False
        self._room.set()

    async def aclose(self) -> None:
        """Drain rejections (bounded), deliver dead letters, commit, close the consumer. Once."""
        if self._closed:
            return
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._recorder_task is not None:
            try:
                await asyncio.wait_for(self._drain_recorder(), self._revoke_timeout)
            except TimeoutError:
                self._log.warning("%s: rejections still unrecorded at close", self.consumer_group)
            self._recorder_task.cancel()
            await asyncio.gather(self._recorder_task, return_exceptions=True)
        if self._thread is not None:
            self._take_targets()  # the targets of the final commit
            self._stop.set()
            await asyncio.to_thread(self._thread.join)

    # ------------------------------------------------------------ public extras

    @property
    def ready(self) -> bool:
        """False after a transient broker error until the broker answers again, or when failed."""
        alive = self._thread is not None and self._thread.is_alive()
        return alive and self._ready and self._failure is None

    def health(self) -> ProducerHealth:
        """Safe from any thread: reads the snapshot the loop refreshes as lanes change."""
        loads = {} if self._ledger is None else dict(self._ledger.loads)
        return ProducerHealth(
            ready=self.ready,
            consumer_group=self.consumer_group,
            assigned_partitions=len(loads),
            held_messages=sum(held for _, held in loads.values()),
            paused=self._applied_pause or self._blocked_since is not None,
            last_error=self._last_error,
            failed=None if self._failure is None else str(self._failure),
        )

    def floor_distances(self) -> dict[tuple[str, int], LaneLoad]:
        """Per partition: messages read above the floor, bytes of the unresolved ones, and
        whether it is paused at a lane bound, as of the last publish (at most one commit
        interval old). Safe from any thread."""
        if self._ledger is None:
            return {}
        return {key: load for key, (load, _) in dict(self._ledger.loads).items()}

    async def commit(self) -> None:
        """Commit every lane's resolved prefix now and wait for the broker's answer.

        Raises :class:`StreamNotOpenError` without an open consumer.
        """
        self._take_targets()
        await self._call(lambda consumer: self._commit_published(consumer, asynchronous=False))

    # --------------------------------------------------------------- loop side

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise StreamNotOpenError("the shared stream is not open")
        return self._loop

    async def _call(self, fn: Callable[[Any], Any]) -> Any:
        thread = self._thread
        if thread is None or not thread.is_alive() or self._stop.is_set():
            raise StreamNotOpenError(f"no open consumer for group {self.consumer_group}")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._commands.put((fn, future))
        return await asyncio.wrap_future(future)

    def _schedule(
        self,
        loop: asyncio.AbstractEventLoop,
        delay: float,
        fn: Callable[..., None],
        *args: Any,
    ) -> None:
        if self._closed:
            return
        handle: asyncio.TimerHandle

        def run() -> None:
            self._timers.discard(handle)
            fn(*args)

        handle = loop.call_later(delay, run)
        self._timers.add(handle)

    def _enqueue_record(self, payload: KafkaPayload, rejections: dict[str, str], why: str,
                        done: Callable[[], None]) -> None:
        msg, origin = payload.message, payload.origin
        row = RejectedMessage(
            origin=origin,
            consumer_group=self.consumer_group,
            rejections=rejections,
            error=why,
            key=msg.key,
            value=msg.value,
        )
        self._to_record.append((done, row))
        self._recorder_idle.clear()
        self._record_wakeup.set()

    async def _recorder_loop(self) -> None:
        """Write rejections in batches; a failing recorder holds them and retries with backoff."""
        backoff = Backoff(0.1, MAX_DLQ_BACKOFF_S)
        while True:
            await self._record_wakeup.wait()
            self._record_wakeup.clear()
            while self._to_record:
                batch = list(self._to_record)
                try:
                    if self._recorder is None:
                        raise RuntimeError("no rejection recorder configured")
                    await self._recorder.record([row for _, row in batch])
                except Exception as exc:
                    self._note_error(f"rejection recorder failed: {type(exc).__name__}")
                    self._log.exception("%s: rejection recorder failed", self.consumer_group)
                    await asyncio.sleep(backoff.next())
                    continue
                backoff.reset()
                self.rejections_recorded += len(batch)
                del self._to_record[: len(batch)]
                for done, _ in batch:
                    done()
            self._recorder_idle.set()

    async def _drain_recorder(self) -> None:
        await self._recorder_idle.wait()

    def _note_error(self, text: str) -> None:
        self._last_error = text
        self._ready = False

    # ----------------------------------------------------------- consumer thread

    def _consumer_config(self) -> dict[str, Any]:
        cfg = dict(self._config)
        cfg["group.id"] = self.consumer_group
        cfg["enable.partition.eof"] = False
        cfg.setdefault("logger", LIBRDKAFKA_LOGGER)
        cfg["error_cb"] = self._on_error
        cfg["on_commit"] = self._on_commit
        cfg.setdefault("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS)
        cfg.setdefault("statistics.interval.ms", STATS_INTERVAL_MS)
        if cfg["statistics.interval.ms"]:
            cfg["stats_cb"] = self._on_stats
        if str(cfg.get("group.protocol", "classic")).lower() != "consumer":
            cfg.setdefault("partition.assignment.strategy", "cooperative-sticky")
        return cfg

    def _thread_main(self) -> None:
        consumer: Any = None
        try:
            consumer = self._consumer_factory(self._consumer_config())
            self._consumer = consumer
            consumer.subscribe(
                list(self._read_topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            self._ready = True
            last_commit = last_probe = time.monotonic()
            self._next_id_check = last_commit + self._id_check_interval
            id_pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"sharedstream-ids:{self.consumer_group}")
            while not self._stop.is_set():
                self._run_commands(consumer)
                if self._lane_requests:
                    self._apply_lane_requests(consumer)
                records = None if self._hold_back(consumer) else self._consume_batch(consumer)
                if self._dlq is not None:
                    self._dlq.poll()
                if records:
                    self._hand_over(records)
                now = time.monotonic()
                if now - last_commit >= self._commit_interval:
                    last_commit = now
                    self._commit_published(consumer, asynchronous=True)
                if not self._ready and now - last_probe >= PROBE_INTERVAL_S:
                    last_probe = now
                    self._probe(consumer)
                self._check_topic_ids(consumer, id_pool, now)
            id_pool.shutdown(wait=False, cancel_futures=True)
            self._shutdown(consumer)
        except BaseException as exc:
            self._log.exception("%s: consumer thread failed", self.consumer_group)
            self._fail(exc)
            if consumer is not None:
                self._close_quietly(consumer)
        finally:
            self._consumer = None
            if self._dlq is not None:
                self._dlq.close(self._revoke_timeout)
            self._fail_commands()

    def _consume_batch(self, consumer: Any) -> list[Any]:
        """What is fetched already, up to a batch; else wait for the first record.

        ``consume(n, timeout)`` returns only when it has ``n`` records or the timeout
        passed, so at a low rate every record would wait for the timeout (~50 ms on
        average at 100 ms) before anyone saw it. Taking what is there without waiting,
        and otherwise waiting for one record and then taking what came with it, keeps
        full batches under load and hands a lone record over as soon as it arrives.
        """
        records: list[Any] = consumer.consume(num_messages=self._batch_size, timeout=0)
        if records:
            return records
        records = consumer.consume(num_messages=1, timeout=self._consume_timeout)
        if records and self._batch_size > 1:
            records += consumer.consume(num_messages=self._batch_size - 1, timeout=0)
        return records

    def _run_commands(self, consumer: Any) -> None:
        """Run the commands queued when the turn started; later ones wait for the next turn,
        so a caller that reacts to one command's result cannot starve ``consume()``."""
        for _ in range(self._commands.qsize()):
            try:
                fn, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(consumer))
            except BaseException as exc:
                future.set_exception(exc)

    def _fail_commands(self) -> None:
        while True:
            try:
                _, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(StreamNotOpenError("the consumer is closed"))

    def _hold_back(self, consumer: Any) -> bool:
        """Backpressure; True when this turn must not call ``consume()``.

        While the loop has ``max_queued`` batches still to take, or the manager asked
        to pause, the thread stops calling ``consume()`` and waits for room (bounded
        by the consume timeout, so commits and commands keep running). It does not
        pause the partitions at once: librdkafka drops its prefetched messages on
        pause and fetches them again on resume, which under steady load would cost
        more than the watchers' work. Only a hold longer than ``pause_after`` pauses
        the assignment and goes back to calling ``consume()``, so rebalance callbacks
        are served and the member stays live however long the watchers take.
        """
        if not (self._pause_requested or self._queued >= self._max_queued):
            self._blocked_since = None
            if self._applied_pause:
                self._set_paused(consumer, False)
            return False
        now = time.monotonic()
        if self._blocked_since is None:
            self._blocked_since = now
        if now - self._blocked_since >= self._pause_after:
            if not self._applied_pause:
                self._set_paused(consumer, True)
            return False
        self._room.clear()
        # Checked again after clear(): room made in between is never missed.
        if self._pause_requested or self._queued >= self._max_queued:
            self._room.wait(self._consume_timeout)
        return True

    def _set_paused(self, consumer: Any, paused: bool) -> None:
        assignment = consumer.assignment()
        if assignment and not paused:
            # A partition at its lane bound stays paused until its lane lifts the bound.
            bounded = self._bounded
            assignment = [tp for tp in assignment if (tp.topic, tp.partition) not in bounded]
        if assignment:
            (consumer.pause if paused else consumer.resume)(assignment)
        self._applied_pause = paused

    def _apply_lane_requests(self, consumer: Any) -> None:
        """Pause the partitions whose lanes reached their bound; seek back and resume the
        ones whose bound lifted.

        Pausing drops what librdkafka prefetched for the partition; what was consumed
        past the bound before the pause landed was discarded by the lane, so resuming
        seeks back to the lane's ``resume_at`` first (a plain resume would continue after
        the last record consumed and skip them). A seek refused now is tried again on the
        next turn: resuming without it would lose those records.
        """
        with self._lock:
            requests, self._lane_requests = self._lane_requests, {}
        for key, (generation, seek_to) in requests.items():
            if self._owned.get(key) != generation:
                continue  # revoked, lost or restarted since the loop asked
            tp = TopicPartition(key[0], key[1])
            if seek_to is None:
                consumer.pause([tp])
                self._bounded.add(key)
                continue
            try:
                consumer.seek(TopicPartition(key[0], key[1], seek_to))
            except KafkaException as exc:
                self._log.warning("%s: %s[%d]: seek to %d before resuming failed (retrying): %s",
                            self.consumer_group, key[0], key[1], seek_to, exc)
                with self._lock:
                    self._lane_requests.setdefault(key, (generation, seek_to))
                continue
            self._bounded.discard(key)
            if not self._applied_pause:
                consumer.resume([tp])
            self._post(LaneRewound(key, generation))

    def _hand_over(self, records: list[Any]) -> None:
        """Wrap a consumed batch; one hop to the loop for the whole batch.

        Runs once per record: lookups are hoisted and a run of records of one
        partition (the usual shape of a batch) reuses its generation. The loop
        admits them into their lanes (``_admit``).
        """
        out: list[Item] = []
        owned = self._owned
        topic_ids = self._topic_ids
        key: Key | None = None
        generation = -1
        watched: tuple[str, ...] = ()
        for record in records:
            error = record.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                self._note_error(f"consume error: {error.str()}")
                continue
            topic, partition = record.topic(), record.partition()
            if key is None or key[1] != partition or key[0] != topic:
                key = (topic, partition)
                generation = owned.get(key, -1)
                watched = self.topics if topic == self.replay_topic else ()
            if generation < 0:
                continue  # not owned in this generation (raced a revocation)
            payload = build_payload(record, topic, partition, record.offset(),
                                    topic_ids.get(topic, ""), generation, watched)
            out.append((payload.message, payload))
        if out:
            with self._lock:
                self._queued += 1
            self._ready = True
            self._post(Records(out))

    def _post(self, item: _Handoff) -> None:
        """Consumer thread -> loop, in order."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def record_skipped(self, lane: PartitionLedger, offset: int) -> None:
        """A record below the committed position: say so, and look for a recreated topic now.

        Nothing that was read is dropped without a log line (once per lane: a whole
        re-read log would otherwise log every record).
        """
        if not lane.below_base_reported:
            lane.below_base_reported = True
            self._log.warning("%s: %s[%d]: skipping offset %d below the committed position %d "
                        "(checking whether the topic was recreated)", self.consumer_group,
                        lane.topic, lane.partition, offset, lane.base)
        self._next_id_check = 0.0

    def _check_topic_ids(self, consumer: Any,
                         pool: concurrent.futures.ThreadPoolExecutor, now: float) -> None:
        """Compare the watched and dead-letter topics' ids with the broker's, off this thread.

        A topic deleted and recreated under a running consumer (same name, a new id,
        offsets from 0 again) keeps its partitions assigned: librdkafka notices the new
        id in its metadata but goes on fetching at the old position, so every record
        below it would be skipped in silence. The ids are asked for on a worker thread
        (an admin round trip never stalls ``consume()``) and a change restarts the
        topic's lanes (:meth:`_restart_recreated`). For the dead-letter topic, an
        unchanged id vouches for the records acknowledged before the check started; a
        changed one sends them again to the new incarnation (``DeadLetterSender``).

        Failure window: records of the new topic at or above the old position that are
        read before the check notices (at most ``TOPIC_ID_CHECK_S``) are keyed by the old
        id; after the restart they are read again under the new id.
        """
        future = self._id_check
        if future is None:
            if now >= self._next_id_check:
                self._next_id_check = now + self._id_check_interval
                topics = self._read_topics
                if self._dlq is not None:
                    self._dlq_mark = self._dlq.mark()
                    topics = (*topics, self._dlq.topic)
                self._id_check = pool.submit(self._topic_id_resolver, self._config, topics)
            return
        if not future.done():
            return
        self._id_check = None
        try:
            ids = future.result()
        except Exception as exc:  # deleted and not back yet, or the broker is away
            self._log.debug("%s: topic ids not checked: %s", self.consumer_group, exc)
            return
        changed = {t: (self._topic_ids[t], i) for t, i in ids.items()
                   if self._topic_ids.get(t) not in (None, i)}
        self._topic_ids.update(ids)
        dlq = self._dlq
        if dlq is not None and dlq.topic in changed:
            old, new = changed.pop(dlq.topic)
            self.topics_recreated += 1
            again = dlq.reincarnate(
                self._dlq_producer_factory(producer_config(self._config)),
                self._revoke_timeout)
            self._log.warning("%s: dead-letter topic %s was deleted and recreated (topic id %s -> "
                        "%s): %d records acknowledged since the last check sent again",
                        self.consumer_group, dlq.topic, old, new, again)
        elif dlq is not None:
            dlq.confirm(self._dlq_mark)
        if changed:
            self._restart_recreated(consumer, changed)

    def _restart_recreated(self, consumer: Any, changed: Mapping[str, tuple[str, str]]) -> None:
        """End the lanes of recreated topics and start new streams at their first offset.

        The old lanes' messages are forgotten by the manager (their log is gone; what was
        persisted stays keyed by the old id) and never committed: the new lanes belong to
        a new generation, so late outcomes of the old ones are discarded.
        """
        self._generation += 1
        restart = sorted(key for key in self._owned if key[0] in changed)
        for key in restart:
            self._owned[key] = self._generation
            self._forget_commits(key)
        for topic, (old, new) in sorted(changed.items()):
            self.topics_recreated += 1
            self._log.warning("%s: topic %s was deleted and recreated (topic id %s -> %s): "
                        "continuing from its first offset as a new stream", self.consumer_group,
                        topic, old, new)
        if not restart:
            return
        self._post(LanesEnded(frozenset(restart)))
        self._post(LanesStarted(self._generation, tuple((t, p, None, frozenset())
                                                     for t, p in restart)))
        for topic, partition in restart:
            consumer.seek(TopicPartition(topic, partition, OFFSET_BEGINNING))
        bounded = [TopicPartition(t, p) for t, p in restart if (t, p) in self._bounded]
        self._bounded.difference_update(restart)
        if bounded and not self._applied_pause:
            consumer.resume(bounded)

    def _on_stats(self, text: str) -> None:
        """librdkafka's periodic statistics: per-partition lag for ``/metrics``."""
        self.partition_stats = partition_stats(text)

    def counters(self) -> dict[str, int]:
        """Counters by Prometheus name (without prefix and ``_total``)."""
        return {"messages_consumed": self.consumed, "commits": self.commits,
                "commit_failures": self.commit_failures,
                "revoke_commit_failures": self.revoke_commit_failures,
                "dead_letters": self.dead_letters,
                "dead_letter_failures": self.dead_letter_failures,
                "rejections_recorded": self.rejections_recorded,
                "topics_recreated": self.topics_recreated}

    def _commit_published(
        self, consumer: Any, *, asynchronous: bool, only: frozenset[Key] | None = None
    ) -> None:
        """One commit request for every owned partition whose published target moved.

        Metadata is encoded here, with the budget the broker allows (it halves when
        the broker refuses it); a target whose commit failed is sent again. The
        asynchronous tick skips a target already sent, answered or not. A synchronous
        commit (revocation, close, ``commit()``) sends every target the broker has not
        confirmed: an asynchronous request still unanswered may yet be refused (a
        rebalance overtook it), and once the partitions are gone nothing would commit
        what they resolved (guarantee 7).
        """
        if self._published:
            with self._lock:
                fresh, self._published = self._published, {}
            self._latest.update(fresh)
            self._unsent.update(fresh)
        if asynchronous:
            keys, done = self._unsent, self._sent
        else:
            keys, done = set(self._latest), self._confirmed
        if only is not None:
            keys = keys & only
        if not keys:
            return
        offsets = []
        for key in list(keys):
            self._unsent.discard(key)
            target = self._target(key)
            if target is None or done.get(key) == target:
                continue
            self._sent[key] = target
            offsets.append(TopicPartition(key[0], key[1], target[0], metadata=target[1]))
        if not offsets:
            return
        try:
            result = consumer.commit(offsets=offsets, asynchronous=asynchronous)
        except KafkaException as exc:
            self._commit_failed(offsets, exc.args[0])
            if not asynchronous:
                raise
            return
        if not asynchronous and result:
            self._on_commit(None, result)

    def _target(self, key: Key) -> tuple[int, str] | None:
        """The latest target of an owned partition as committed: (offset, metadata)."""
        latest = self._latest.get(key)
        if latest is None or self._owned.get(key) != latest[0]:
            return None
        _, offset, above = latest
        return offset, encode_progress(offset, above, self._metadata_max_chars)

    def _forget_commits(self, key: Key) -> None:
        self._latest.pop(key, None)
        self._sent.pop(key, None)
        self._confirmed.pop(key, None)
        self._unsent.discard(key)

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        failed = [tp for tp in partitions if tp.error is not None]
        if error is None:
            for tp in partitions:
                key = (tp.topic, tp.partition)
                if tp.error is None and key in self._owned:
                    self._confirmed[key] = (tp.offset, tp.metadata or "")
        if error is not None or failed:
            first = error if error is not None else failed[0].error
            assert first is not None
            self._commit_failed(failed or partitions, first)
        else:
            self.commits += 1
            self._ready = True

    def _commit_failed(self, partitions: Sequence[TopicPartition], error: KafkaError) -> None:
        """Mark the lanes for recommit; shrink metadata if the broker found it too long."""
        self.commit_failures += 1
        if error.code() == KafkaError.OFFSET_METADATA_TOO_LARGE:
            self._metadata_max_chars //= 2
            self._log.warning(
                "%s: broker refused commit metadata; remembering at most %d chars",
                self.consumer_group,
                self._metadata_max_chars,
            )
        elif error.code() in _REBALANCE_ERRORS:
            # The group moved to a new generation under this request; the lanes still
            # owned afterwards are recommitted on the next tick. Lanes gone already were
            # committed (or counted as failed) synchronously when they went.
            owned = any((tp.topic, tp.partition) in self._owned for tp in partitions)
            self._log.log(logging.INFO if owned else logging.DEBUG,
                          "%s: commit %s by a rebalance: %s", self.consumer_group,
                          "deferred" if owned else "of partitions already gone refused",
                          error.str())
        else:
            self._note_error(f"commit failed: {error.str()}")
            self._log.warning("%s: commit failed: %s", self.consumer_group, error.str())
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if key in self._owned:
                self._sent.pop(key, None)
                self._unsent.add(key)

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fail(KafkaException(error))
            return
        self._note_error(error.str())
        self._log.warning("%s: broker error: %s", self.consumer_group, error.str())

    def _probe(self, consumer: Any) -> None:
        try:
            consumer.list_topics(self.topics[0], timeout=1.0)
        except KafkaException:
            return
        self._ready = True

    def _fail(self, exc: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = exc
        self._stop.set()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    # rebalance callbacks: run on the consumer thread, inside consume() or close()

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Start new lanes from committed offset + remembered progress (no seek in here).

        The committed offsets are the one round trip left in here: the assignment must
        name where each partition starts, and the remembered offsets must be known before
        its first record is admitted (or a message handled before would be handed out
        again). Topic ids are not asked for here: the periodic check (on its worker
        thread) runs at once instead, and restarts a topic found recreated.
        """
        self._next_id_check = 0.0
        committed = self._committed(consumer, partitions)
        self._generation += 1
        start: list[TopicPartition] = []
        lanes: list[tuple[str, int, int | None, frozenset[int]]] = []
        for tp in committed:
            base = tp.offset if tp.offset >= 0 else None
            remembered = decode_progress(tp.offset, tp.metadata) if base is not None else ()
            key = (tp.topic, tp.partition)
            self._owned[key] = self._generation
            self._forget_commits(key)
            self._bounded.discard(key)
            lanes.append((tp.topic, tp.partition, base, frozenset(remembered)))
            # A replay topic never committed starts at its beginning whatever
            # auto.offset.reset says: "latest" would skip replays made before this start.
            reset = OFFSET_BEGINNING if tp.topic == self.replay_topic else OFFSET_INVALID
            start.append(TopicPartition(tp.topic, tp.partition, reset if base is None else base))
        self._post(LanesStarted(self._generation, tuple(lanes)))
        if self._incremental:
            consumer.incremental_assign(start)
        else:
            consumer.assign(start)
        if self._applied_pause:
            consumer.pause(start)
        self._log.info("%s: assigned %s", self.consumer_group, _names(start))

    def _committed(self, consumer: Any, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Committed offsets with metadata; on failure start from the stored offset, forgetful."""
        try:
            result: list[TopicPartition] = consumer.committed(
                partitions, timeout=self._revoke_timeout
            )
            return result
        except KafkaException as exc:
            self._log.warning("%s: committed offsets unavailable: %s", self.consumer_group, exc)
            return [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID) for tp in partitions]

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Let the watchers finish what they hold of these partitions (bounded), deliver
        pending dead letters, commit the revoked resolved prefix, drop the lanes."""
        self._settle_with_loop(frozenset((tp.topic, tp.partition) for tp in partitions),
                               self._revoke_timeout)
        if self._dlq is not None and self._dlq.flush(self._revoke_timeout):
            self._log.warning("%s: dead letters still undelivered at revoke", self.consumer_group)
        self._sync_with_loop(self._revoke_timeout)
        self._commit_revoked(consumer, frozenset((tp.topic, tp.partition) for tp in partitions))
        self._drop(partitions)
        self._log.info("%s: revoked %s", self.consumer_group, _names(partitions))

    def _commit_revoked(self, consumer: Any, revoked: frozenset[Key]) -> None:
        """Have the broker confirm the revoked partitions' targets before they go.

        A failure is retried with backoff within ``revoke_timeout``, except one saying a
        rebalance overtook the request: inside this callback the member cannot join the
        new generation, so sending again would be refused again. What stays unconfirmed
        is a warning and counts in ``revoke_commit_failures``; the next owner hands out
        again what it resolved since the last confirmed commit (docs/guarantees.md).
        """
        deadline = time.monotonic() + self._revoke_timeout
        backoff = Backoff(REVOKE_RETRY_S, self._revoke_timeout)
        error = ""
        while True:
            try:
                self._commit_published(consumer, asynchronous=False, only=revoked)
                break
            except KafkaException as exc:
                error = exc.args[0].str()
                delay = backoff.next()
                if exc.args[0].code() in _REBALANCE_ERRORS or time.monotonic() + delay > deadline:
                    break
            time.sleep(delay)
        unconfirmed = sorted(key for key in revoked
                             if (target := self._target(key)) is not None
                             and self._confirmed.get(key) != target)
        if unconfirmed:
            self.revoke_commit_failures += len(unconfirmed)
            self._log.warning(
                "%s: commit at revoke failed for %s (%s): their next owner hands out again "
                "what they resolved since their last confirmed commit", self.consumer_group,
                ", ".join(f"{t}[{p}]" for t, p in unconfirmed), error or "not confirmed")

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Another member may own these already: commit nothing, forget everything."""
        self._drop(partitions)
        self._log.warning("%s: lost %s", self.consumer_group, _names(partitions))

    def _drop(self, partitions: list[TopicPartition]) -> None:
        """Forget the partitions here and have the loop end their lanes (the manager
        forgets their messages too)."""
        dropped = frozenset(key for tp in partitions
                            if self._owned.pop(key := (tp.topic, tp.partition), None) is not None)
        for key in dropped:
            self._forget_commits(key)
            self._bounded.discard(key)
        if dropped:
            self._post(LanesEnded(dropped))

    def _shutdown(self, consumer: Any) -> None:
        """Clean close: dead letters, final commit, leave the group."""
        if self._dlq is not None:
            self._dlq.flush(self._revoke_timeout)
        self._sync_with_loop(self._revoke_timeout)
        self._final_commit(consumer)
        self._close_quietly(consumer)

    def _final_commit(self, consumer: Any) -> None:
        """Commit the resolved prefix of every owned lane, through a rebalance if one is on.

        A member stopping while another joins or leaves (routine when scaling) sees its
        final commit refused with the old generation. Giving up there would hand the next
        owner messages every watcher already handled (guarantee 7) and send their dead
        letters again. Instead the consumer, paused so it fetches nothing more, serves the
        rebalance (the revoke callback commits what moves away) and the commit is retried
        with the new generation, within ``revoke_timeout``.
        """
        deadline = time.monotonic() + self._revoke_timeout
        while True:
            try:
                self._commit_published(consumer, asynchronous=False)
                return
            except KafkaException as exc:
                remaining = deadline - time.monotonic()
                if exc.args[0].code() not in _REBALANCE_ERRORS or remaining <= 0:
                    self._log.warning("%s: final commit failed: %s", self.consumer_group, exc)
                    return
            self._set_paused(consumer, True)
            # Nothing fetched now would be handled: the next owner reads it again.
            consumer.consume(num_messages=self._batch_size,
                             timeout=min(self._consume_timeout, remaining))

    def _close_quietly(self, consumer: Any) -> None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            self._log.warning("%s: close failed: %s", self.consumer_group, exc)


def _names(partitions: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
