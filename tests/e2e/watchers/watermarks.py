"""Watermark watchers written as the README shows, with every kind of hold on demand.

One shared-stream group on ``$E2E_TOPIC`` (DLQ ``$E2E_DLQ``). Every watcher keeps a
per-partition watermark ``last_seen/<partition>`` of the ids it kept, and skips what
is at or below it unless the copy is ``catching_up``: the documented pattern
(README, docs/watchers.md "Watermarks and replays"). After a crash, a message a watcher
did not durably handle must come back ``catching_up``, or this skip loses it.

``$E2E_WATCHERS`` selects the watchers (comma-separated):

* ``wm_stream``: per-message (``filter_shared_stream``), keeps every id;
* ``wm_batch``: a batch filter (``filter_shared_batch``) doing the same;
* ``wm_routed``: the same batch filter with a match (``ROUTED``: the key ``0`` and the
  keys that start with ``1``), so it is handed only those ids (issue 42), and raises
  as ``wm_batch``;
* ``wm_reject``: per-message, rejects ids in ``$E2E_REJECT_EVERY`` (every Nth id) to
  the DLQ, keeps the rest;
* ``wm_slow``: per-message, sleeps ``$E2E_SLOW_SECONDS`` on each id (it lags, and its
  queue fills).

Faults, each while its flag file exists (a test removes it to end the fault):

* ``$E2E_RAISE_FLAG``: ``wm_stream``, ``wm_batch`` and ``wm_routed`` raise on ids that
  are multiples of ``$E2E_RAISE_EVERY``;
* ``$E2E_STUCK_FLAG``: ``wm_stream`` hangs on ids that are multiples of
  ``$E2E_STUCK_EVERY`` (only ``ack_timeout`` gets it off them).

With ``$E2E_EVIDENCE`` naming a directory, each watcher appends a line per fault it
caused and per retry it received (``<watcher> <what> <id>``) to ``<pid>.log`` there,
unbuffered: what a process killed with SIGKILL did is on disk. The crash test reads it
to prove that every kind of hold occurred.
"""

from __future__ import annotations

import asyncio
import json
import os
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
EVIDENCE = os.environ.get("E2E_EVIDENCE")
_evidence_fd: int | None = None


def every(variable: str) -> int:
    return int(os.environ.get(variable) or 0)


def raised(variable: str) -> bool:
    flag = os.environ.get(variable)
    return bool(flag) and Path(str(flag)).exists()


def note(watcher: str, what: str, n: int) -> None:
    global _evidence_fd
    if EVIDENCE is None:
        return
    if _evidence_fd is None:
        _evidence_fd = os.open(Path(EVIDENCE) / f"{os.getpid()}.log",
                               os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(_evidence_fd, f"{watcher} {what} {n}\n".encode())


class Watermarked(KafkaSharedStreamTrigger):
    """The README's watermark filter, per message."""

    name = ""

    async def before(self, n: int) -> None:
        """Fault injection, run on every message before it is judged."""

    def rejects(self, n: int) -> bool:
        return False

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            n = json.loads(message.value or b"{}")["id"]
            if message.is_retry:
                note(self.name, "retry", n)
            key = f"last_seen/{message.partition}"
            last_seen = await self.asset_state_store.aget(key, default=-1)
            if n <= last_seen and not message.catching_up:
                continue  # handled before: a crash redelivery
            await self.before(n)
            if self.rejects(n):
                reject_shared_stream_event(f"id {n} rejected")
                continue
            await self.asset_state_store.aadvance(key, n)
            yield TriggerEvent({"id": n})


class WatermarkedBatch(Watermarked):
    """The same filter over a batch: one call, the watermark read once per partition."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        last: dict[int, int] = {}
        for message in batch:
            n = message.json["id"]
            if message.is_retry:
                note(self.name, "retry", n)
            key = f"last_seen/{message.partition}"
            if message.partition not in last:
                last[message.partition] = await self.asset_state_store.aget(key, default=-1)
            if n <= last[message.partition] and not message.catching_up:
                continue
            await self.before(n)
            await self.asset_state_store.aadvance(key, n)
            last[message.partition] = max(last[message.partition], n)
            batch.emit(message, TriggerEvent({"id": n}))


class Raising(Watermarked):
    async def before(self, n: int) -> None:
        step = every("E2E_RAISE_EVERY")
        if step and n % step == 0 and raised("E2E_RAISE_FLAG"):
            note(self.name, "raise", n)
            raise RuntimeError(f"{self.name} fails on id {n}")
        step = every("E2E_STUCK_EVERY")
        if step and n % step == 0 and await asyncio.to_thread(raised, "E2E_STUCK_FLAG"):
            note(self.name, "stuck", n)
            await asyncio.Event().wait()


class RaisingBatch(WatermarkedBatch):
    async def before(self, n: int) -> None:
        step = every("E2E_RAISE_EVERY")
        if step and n % step == 0 and raised("E2E_RAISE_FLAG"):
            note(self.name, "raise", n)
            raise RuntimeError(f"{self.name} fails on id {n}")


class Rejecting(Watermarked):
    def rejects(self, n: int) -> bool:
        step = every("E2E_REJECT_EVERY")
        return bool(step) and n % step == 0


class Slow(Watermarked):
    async def before(self, n: int) -> None:
        await asyncio.sleep(float(os.environ.get("E2E_SLOW_SECONDS", "0.002")))


CATALOGUE: dict[str, type[Watermarked]] = {
    "wm_stream": Raising, "wm_batch": RaisingBatch, "wm_routed": RaisingBatch,
    "wm_reject": Rejecting, "wm_slow": Slow}
SELECTED = os.environ.get("E2E_WATCHERS", "wm_stream,wm_batch").split(",")
ROUTED: dict[str, Any] = {"wm_routed": {"key": ["0", {"prefix": "1"}]}}
"""The watchers with a match: id 0 (so its raise comes with the first message, as
``wm_batch``'s) and the ids whose key (the id as text) starts with ``1``."""


def watcher(name: str) -> Watermarked:
    trigger = CATALOGUE[name](topics=[TOPIC], kafka_config_id="e2e", poll_timeout=0.2,
                              dlq_topic=DLQ, match=ROUTED.get(name))
    trigger.name = name
    return trigger


assets = [
    Asset(name, uri=f"kafka://127.0.0.1:9092/{TOPIC}",
          watchers=[AssetWatcher(name, watcher(name))])
    for name in SELECTED
]
