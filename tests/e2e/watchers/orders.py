"""The e2e watcher module: one shared-stream group on ``$E2E_TOPIC`` (DLQ ``$E2E_DLQ``).

Every watcher that keeps a message advances its asset's ``watermark`` to the
message's id in the same unit of work as the event, so a test can check that a
watermark never runs ahead of (or behind) the events persisted with it.

``$E2E_WATCHERS`` (comma-separated) selects the declared watchers, so one module
serves every test (and a different selection is a different cohort):

Watchers of both kinds run in one group, so every test that selects more than one proves
both: ``everything``, ``sibling``, ``quitter``, ``slow``, ``stuck``, ``text`` and ``json``
are per-message filters (``filter_shared_stream``); ``evens``, ``picky``, ``flaky`` and
``mirror`` are batch filters (``filter_shared_batch``) doing the same job: the same
events, rejections and watermark writes, judged message by message inside the call.

* ``everything`` keeps every message; ``evens`` keeps even ids (half);
* ``picky`` rejects ids ending in 07 (1 %) to the DLQ and keeps the rest;
* ``flaky`` keeps every message but raises on every 50th id while the file
  ``$E2E_FLAKY_FLAG`` exists;
* ``mirror`` keeps every message, like ``everything`` (a second keep-all watcher);
* ``quitter`` keeps every message, but its filter ends at once while the file
  ``$E2E_QUIT_FLAG`` exists (a watcher missing from its cohort);
* ``sibling`` keeps every message, like ``everything`` (the fault suite's reference);
* ``slow`` keeps every message after sleeping ``$E2E_SLOW_SECONDS`` on each;
* ``stuck`` keeps every message, but hangs on ids in ``$E2E_STUCK_IDS`` while the file
  ``$E2E_STUCK_FLAG`` exists (only ``ack_timeout`` gets it off them);
* ``text`` is the stock :class:`KafkaSharedStreamTrigger` (UTF-8 events, tombstones
  skipped, undecodable values rejected): what a user gets without subclassing;
* ``json`` yields each value parsed as JSON and rejects what does not parse, including
  documents nested too deep for Python (RecursionError).

With ``$E2E_HANDOUTS`` naming a directory, every watcher writes down every message it
is handed (``watcher partition offset``, one line each) in ``<pid>.log`` there, with an
unbuffered append per line: what a process killed with SIGKILL was handed is on disk.
Tests compare hand-outs with the committed offsets, not only events with ids (an
event's unique key makes a second hand-out invisible in the database).

With ``$E2E_START_GATE`` naming a directory, loading this module says so in the log
("waits at the start gate") and waits until a file named for the process's pid appears
there. A test starts the next process of a kill series early (its imports, about two
seconds of CPU, overlap the running one) and opens its gate right after the kill: the
triggerer loads its watchers before it connects to Kafka or the database, so a process
at the gate has touched neither.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    MessageBatch,
    TriggerEvent,
    reject_shared_stream_event,
)

TOPIC = os.environ["E2E_TOPIC"]
DLQ = os.environ.get("E2E_DLQ") or None
HANDOUTS = os.environ.get("E2E_HANDOUTS")
if os.environ.get("E2E_START_GATE"):
    _gate = Path(os.environ["E2E_START_GATE"]) / str(os.getpid())
    print(f"e2e: process {os.getpid()} waits at the start gate", file=sys.stderr, flush=True)
    while not _gate.exists():
        time.sleep(0.01)
_handout_fd: int | None = None


def record_handout(watcher: str, message: KafkaMessage) -> None:
    global _handout_fd
    if HANDOUTS is None:
        return
    if _handout_fd is None:
        _handout_fd = os.open(Path(HANDOUTS) / f"{os.getpid()}.log",
                              os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(_handout_fd, f"{watcher} {message.partition} {message.offset}\n".encode())


class Keep(KafkaSharedStreamTrigger):
    """Keeps the ids :meth:`keeps` accepts, rejects those :meth:`rejects` names."""

    name = ""  # the watcher's name, for the hand-out record

    def keeps(self, n: int) -> bool:
        return True

    def rejects(self, n: int) -> bool:
        return False

    async def before(self, n: int) -> None:
        """A hook run on every message before it is judged (fault injection)."""

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            record_handout(self.name, message)
            assert message.value is not None
            n = json.loads(message.value)["id"]
            await self.before(n)
            if self.rejects(n):
                reject_shared_stream_event(f"id {n} ends in 07")
                continue
            if not self.keeps(n):
                continue
            await self.asset_state_store.aadvance("watermark", n)
            yield TriggerEvent({"id": n})


class KeepBatch(Keep):
    """:class:`Keep`'s judgement as a batch filter: every message of the call is written
    down as handed out first (a kill mid-call has handed out all of them), then judged;
    a ``before`` that raises fails the call, which the runner splits down to that id."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        for message in batch:
            record_handout(self.name, message)
        for message in batch:
            n = message.json["id"]
            await self.before(n)
            if self.rejects(n):
                batch.reject(message, f"id {n} ends in 07")
            elif self.keeps(n):
                await self.asset_state_store.aadvance("watermark", n)
                batch.emit(message, TriggerEvent({"id": n}))


class Evens(KeepBatch):
    def keeps(self, n: int) -> bool:
        return n % 2 == 0


class Picky(KeepBatch):
    def rejects(self, n: int) -> bool:
        return n % 100 == 7


def flag_raised(variable: str) -> bool:
    """Whether the file named by ``$variable`` exists (tests remove it to end a fault)."""
    flag = os.environ.get(variable)
    return bool(flag) and Path(str(flag)).exists()


class Flaky(KeepBatch):
    async def before(self, n: int) -> None:
        if n % 50 == 0 and flag_raised("E2E_FLAKY_FLAG"):
            raise RuntimeError(f"flaky watcher fails on id {n}")


class Quitter(Keep):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        if flag_raised("E2E_QUIT_FLAG"):
            return
        async for event in super().filter_shared_stream(stream):
            yield event


class Slow(Keep):
    async def before(self, n: int) -> None:
        await asyncio.sleep(float(os.environ.get("E2E_SLOW_SECONDS", "0.01")))


class Stuck(Keep):
    async def before(self, n: int) -> None:
        stuck = {int(i) for i in os.environ.get("E2E_STUCK_IDS", "").split(",") if i}
        if n in stuck and await asyncio.to_thread(flag_raised, "E2E_STUCK_FLAG"):
            await asyncio.Event().wait()


class Json(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            if message.value is None:
                continue
            try:
                document = json.loads(message.value)
            except (ValueError, RecursionError) as error:
                reject_shared_stream_event(f"not JSON: {type(error).__name__}")
                continue
            yield TriggerEvent(document)


CATALOGUE: dict[str, type[KafkaSharedStreamTrigger]] = {
    "everything": Keep, "evens": Evens, "picky": Picky, "flaky": Flaky, "mirror": KeepBatch,
    "quitter": Quitter, "sibling": Keep, "slow": Slow, "stuck": Stuck,
    "text": KafkaSharedStreamTrigger, "json": Json}
SELECTED = os.environ.get("E2E_WATCHERS", "everything,evens,picky").split(",")

def watcher(name: str) -> KafkaSharedStreamTrigger:
    trigger = CATALOGUE[name](topics=[TOPIC], kafka_config_id="e2e", poll_timeout=0.2,
                              dlq_topic=DLQ)
    if isinstance(trigger, Keep):
        trigger.name = name
    return trigger


assets = [
    Asset(name, uri=f"kafka://127.0.0.1:9092/{TOPIC}",
          watchers=[AssetWatcher(name, watcher(name))])
    for name in SELECTED
]
