"""A batch watcher's ``value_deserializer.prepare`` (the registry formats' first schema
lookup, in a worker thread) runs for the batch's messages before the call (issue 27):
the call finds every message prepared, a value the step finds undecodable still reaches
the call, and a registry that does not answer holds the batch without an attempt."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from manager_fakes import Harness, settle
from test_manager_batches import BatchTrigger, lane

from sharedstream import MessageBatch
from sharedstream.core.message import ValueDecodeError
from sharedstream.core.streamconfig import InfrastructureError

pytestmark = pytest.mark.unit


class Registry:
    """A ``value_deserializer`` whose ``prepare`` needs a lookup for odd offsets: it
    answers once ``up`` is set, refuses with InfrastructureError while ``down``, and
    finds ``p:3`` undecodable."""

    def __init__(self) -> None:
        self.prepared: set[str] = set()
        self.up = asyncio.Event()
        self.down = False

    def prepare(self, message: str) -> Awaitable[None] | None:
        if int(message.split(":")[1]) % 2 == 0 or message in self.prepared:
            return None
        return self._lookup(message)

    async def _lookup(self, message: str) -> None:
        if self.down:
            raise InfrastructureError("registry down")
        await self.up.wait()
        self.prepared.add(message)
        if message == "p:3":
            raise ValueDecodeError("not framed")


def start(h: Harness, registry: Registry, seen: list[set[str]]) -> BatchTrigger:
    async def note(batch: MessageBatch) -> None:
        seen.append(set(registry.prepared))

    trigger = BatchTrigger(note)
    trigger.value_deserializer = registry  # type: ignore[attr-defined]
    h.triggers["a"] = trigger
    h.tasks["a"] = asyncio.get_running_loop().create_task(h.manager.run_watcher("a", trigger))
    return trigger


async def test_the_call_waits_for_the_lookups_and_gets_every_message() -> None:
    h, registry, seen = Harness(["a"]), Registry(), list[set[str]]()
    trigger = start(h, registry, seen)
    await settle()
    h.producer.feed(*lane(6))
    await settle()
    assert trigger.calls == []  # the lookups are not answered yet: no call
    registry.up.set()
    await settle()
    assert trigger.calls == [[f"p:{i}" for i in range(6)]]  # p:3 too: the call rejects it
    assert seen == [{"p:1", "p:3", "p:5"}]
    assert h.producer.dead_letters == [] and h.publish() == {"p": 6}  # all six acked
    await h.stop()


async def test_a_registry_outage_holds_the_batch_without_an_attempt() -> None:
    h, registry, seen = Harness(["a"], max_attempts=1), Registry(), list[set[str]]()
    registry.down = True
    trigger = start(h, registry, seen)
    await settle()
    h.producer.feed(*lane(4))
    await settle()
    assert trigger.calls == [] and h.producer.dead_letters == []
    registry.down = False
    registry.up.set()
    h.clock.advance(60)  # past the backoff: the held messages come again
    await settle()
    assert sorted(m for call in trigger.calls for m in call) == [f"p:{i}" for i in range(4)]
    assert h.producer.dead_letters == []  # max_attempts=1, yet nothing dead-lettered
    assert all(h.outcome(p).acked == {"a"} for p in lane(4))
    await h.stop()
