"""The dead-letter outbox: a rejected message's dead letter, retried until it is durable.

On the event loop. :meth:`DeadLetterOutbox.send` produces the record through the
:class:`DeadLetterSender`; its delivery report arrives on the consumer thread (the
sender is polled there) and comes back to the loop with ``call_soon_threadsafe``.
A transient failure sends again after a jittered exponential backoff (a loop timer,
cancelled at close); a record the topic refuses for good (too large, say), or any
rejection without a dead-letter topic, goes to the rejection recorder instead: a task
that writes rows in batches and retries a failing recorder with backoff. ``done`` is
called on the loop once the dead letter or the row is durable, never before.

Failure windows: a crash after the record was delivered and before the commit produces
it again after restart (a duplicate with the same identity header); a crash after the
recorder stored a row and before the commit records it again (recorders are idempotent
by identity). A retry whose message is no longer the ledger's to deliver (its partition
went) is dropped: the next owner rejects it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from confluent_kafka import KafkaError

from sharedstream.core.backoff import Backoff, exponential, jittered
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.ledger import Ledger
from sharedstream.kafka.dead_letters import DeadLetterSender, is_permanent
from sharedstream.kafka.handoff_status import ConsumerStatus
from sharedstream.kafka.payload import KafkaPayload
from sharedstream.kafka.rejections import RejectedMessage, RejectionRecorder

MAX_DLQ_BACKOFF_S = 30.0


class DeadLetterOutbox:
    """Dead letters and rejection rows of one group (see module docstring)."""

    def __init__(self, *, sender: DeadLetterSender | None, recorder: RejectionRecorder | None,
                 status: ConsumerStatus, ledger: Ledger,
                 loop: asyncio.AbstractEventLoop, consumer_group: str,
                 log: logging.LoggerAdapter[logging.Logger]) -> None:
        self.sender = sender
        self._recorder = recorder
        self._status = status
        self._ledger = ledger
        self._loop = loop
        self._group = consumer_group
        self._log = log
        self._timers: set[asyncio.TimerHandle] = set()
        self._closed = False
        self._to_record: list[tuple[Callable[[], None], RejectedMessage]] = []
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task = asyncio.create_task(self._record_rows())

    def send(self, payload: KafkaPayload, rejections: dict[str, str],
             done: Callable[[], None]) -> None:
        if self.sender is None:
            self._enqueue(payload, rejections, "no dead-letter topic configured", done)
            return
        loop, status = self._loop, self._status
        attempt = [0]

        def reported(error: KafkaError | None) -> None:
            # Runs on the consumer thread (poll/flush) or inline on the loop (refused).
            if error is None:
                status.count(_dead_letter)
                loop.call_soon_threadsafe(done)
            elif is_permanent(error):
                loop.call_soon_threadsafe(self._enqueue, payload, rejections,
                                          f"dead-letter refused: {error.str()}", done)
            else:
                attempt[0] += 1
                status.count(_dead_letter_failure)
                status.note_error(f"dead-letter delivery failed: {error.str()}")
                delay = jittered(exponential(attempt[0], 0.2, MAX_DLQ_BACKOFF_S))
                loop.call_soon_threadsafe(self._schedule, delay, resend)

        def resend() -> None:
            if self.sender is not None and self._ledger.delivering(payload):
                self.sender.send(payload, rejections, reported)

        self.sender.send(payload, rejections, reported)

    def _schedule(self, delay: float, fn: Callable[[], None]) -> None:
        if self._closed:
            return
        handle: asyncio.TimerHandle

        def run() -> None:
            self._timers.discard(handle)
            fn()

        handle = self._loop.call_later(delay, run)
        self._timers.add(handle)

    def _enqueue(self, payload: KafkaPayload, rejections: dict[str, str], why: str,
                 done: Callable[[], None]) -> None:
        msg = payload.message
        row = RejectedMessage(origin=payload.origin, consumer_group=self._group,
                              rejections=rejections, error=why, key=msg.key, value=msg.value)
        self._to_record.append((done, row))
        self._idle.clear()
        self._wakeup.set()

    async def _record_rows(self) -> None:
        """Write rejections in batches; a failing recorder holds them and retries."""
        backoff = Backoff(0.1, MAX_DLQ_BACKOFF_S)
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._to_record:
                batch = list(self._to_record)
                try:
                    if self._recorder is None:
                        raise RuntimeError("no rejection recorder configured")
                    await self._recorder.record([row for _, row in batch])
                except Exception as exc:
                    self._status.note_error(f"rejection recorder failed: {type(exc).__name__}")
                    self._log.exception("%s: rejection recorder failed", self._group)
                    await asyncio.sleep(backoff.next())
                    continue
                backoff.reset()
                self._status.count(_rows, len(batch))
                del self._to_record[: len(batch)]
                for done, _ in batch:
                    done()
            self._idle.set()

    async def aclose(self, within: float) -> None:
        """Stop retrying; write what waits for the recorder (at most ``within`` seconds)."""
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        try:
            await asyncio.wait_for(self._idle.wait(), within)
        except TimeoutError:
            self._log.warning("%s: rejections still unrecorded at close", self._group)
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def _dead_letter(c: AdapterCounters, n: int) -> None:
    c.dead_letters += n


def _dead_letter_failure(c: AdapterCounters, n: int) -> None:
    c.dead_letter_failures += n


def _rows(c: AdapterCounters, n: int) -> None:
    c.rejections_recorded += n
