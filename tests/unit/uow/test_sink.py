"""Unit-of-work logic without services: folding staged writes, payload encoding, and the
sink + state access behind the real manager fed by an in-memory producer (SQLite file)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from pathlib import Path
from typing import Any

import pytest

from sharedstream.core.manager import SharedStreamManager
from sharedstream.statestore import AssetScope, StateStore, TaskScope
from sharedstream.statestore.scopes import Writer
from sharedstream.statestore.staging import StagedAdvance, StagedDelete, StagedSet, StagedWrites
from sharedstream.testing.memorystream import LocalRecord, MemoryStream
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent
from sharedstream.uow.batchmerge import fold_staged
from sharedstream.uow.eventrows import PayloadRefused, encode_payload
from sharedstream.uow.sink import DatabaseWorkSink

SCOPE = AssetScope(asset_id=1)
W = Writer.watcher("w")


def unit(cleared: bool = False, **ops: Any) -> StagedWrites:
    staged = StagedWrites()
    staging = staged.asset(SCOPE)
    staging.cleared = cleared
    for key, op in ops.items():
        staging.ops[key] = op
    return staged


def adv(value: Any) -> StagedAdvance:
    return StagedAdvance(value, str(value), W)


def put(value: Any) -> StagedSet:
    return StagedSet(value, str(value), W)


@pytest.mark.parametrize(("earlier", "later", "expected"), [
    (adv(5), adv(7), adv(7)),
    (adv(7), adv(5), adv(7)),            # a lagging advance never moves a key back
    (put(5), adv(7), put(7)),            # sequentially: set, then advance re-checked vs 5
    (put(9), adv(7), put(9)),
    (StagedDelete(), adv(3), put(3)),    # an absent key accepts any advance
    (adv(3), put(1), put(1)),
    (adv(3), StagedDelete(), StagedDelete()),
])
def test_fold_equals_applying_in_order(earlier: Any, later: Any, expected: Any) -> None:
    folded = fold_staged([unit(k=earlier), unit(k=later)]).asset(SCOPE)
    assert folded.ops == {"k": expected} and not folded.cleared


def test_fold_a_clear_drops_earlier_writes_and_later_advances_become_sets() -> None:
    folded = fold_staged([unit(a=put(1), b=adv(2)), unit(cleared=True, c=adv(4)),
                          unit(d=adv(5))]).asset(SCOPE)
    assert folded.cleared and folded.ops == {"c": put(4), "d": put(5)}


def test_fold_refuses_task_state() -> None:
    staged = StagedWrites()
    staged.clear_task_group(TaskScope("d", "r", "t"))
    with pytest.raises(ValueError, match="task state"):
        fold_staged([staged])


def test_encode_payload_once_and_refuse_what_cannot_be_stored() -> None:
    assert encode_payload({"a": [1, "é"]}, 100) == '{"a":[1,"é"]}'
    with pytest.raises(PayloadRefused, match=r"^event payload not JSON: .*set"):
        encode_payload({1, 2}, 100)
    with pytest.raises(PayloadRefused, match="not JSON"):
        encode_payload(float("nan"), 100)
    with pytest.raises(PayloadRefused, match="over the 10-byte limit"):
        encode_payload("x" * 20, 10)


def test_encode_payload_refuses_a_nul_character_on_every_database() -> None:
    """PostgreSQL's jsonb cannot hold U+0000 (issue 43): found here, it is the watcher's
    rejection with the fix, not a batch failing on the server; the same on every database,
    so a watcher does not work on one and fail on another. A backslash before "u0000" is
    text, not a NUL, and is stored."""
    with pytest.raises(PayloadRefused, match=r"NUL character \(U\+0000\).*jsonb"):
        encode_payload({"text": "a\x00b"}, 100)
    with pytest.raises(PayloadRefused, match="NUL"):
        encode_payload(["\\", "\x00"], 100)
    assert encode_payload({"text": "\\u0000"}, 100) == '{"text":"\\\\u0000"}'


# -- through the real manager ------------------------------------------------------------

STREAMS: list[MemoryStream] = []


class Marks(BaseEventTrigger):
    """Keeps even offsets, each once, by a per-partition watermark; one poison payload."""

    def shared_stream_key(self) -> Hashable:
        return "list"

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tests.Marks", {}

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Any) -> MemoryStream:
        stream = MemoryStream(commit_interval=0.01)
        STREAMS.append(stream)
        return stream

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for partition, offset in stream:
            if offset % 2:
                continue
            key = f"last_seen/{partition}"
            if offset <= await self.asset_state_store.aget(key, default=-1):
                continue
            await self.asset_state_store.aadvance(key, offset)
            yield TriggerEvent(object() if offset == 10 else {"o": offset})


async def test_manager_sink_and_state_access_with_an_in_memory_producer(tmp_path: Path) -> None:
    STREAMS.clear()
    store = StateStore.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.upgrade()
    asset_id = store.register_asset("marks")
    sink = DatabaseWorkSink(
        store, {"m": asset_id}, ProcessSettings(uow_batch_size=7, uow_max_delay=0.005),
        coordinates=lambda p: ("t", "tid", int(p.topic), p.offset))
    manager = SharedStreamManager(sink)
    trigger = Marks()
    trigger.asset_state_store = WatcherStateAccess(store, "m", "marks", asset_id)
    manager.declare_cohort("list", ["m"])
    task = asyncio.create_task(manager.run_watcher("m", trigger))
    for _ in range(1000):  # the group builds its producer when the watcher subscribes
        if STREAMS:
            break
        await asyncio.sleep(0)
    stream = STREAMS[-1]
    stream.feed_items([((p, o), LocalRecord(str(p), o)) for o in range(40) for p in range(2)])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    ends = {("0", 0): 40, ("1", 0): 40}
    while {k: t[1] for k, t in stream.published.items()} != ends:
        assert loop.time() < deadline, f"committed {stream.published}"
        await asyncio.sleep(0.01)
    letters = {p.coordinates: r for p, r in stream.dead_letters}
    assert letters.keys() == {("0", 10), ("1", 10)}
    assert letters[("0", 10)]["m"].startswith("event payload not JSON: ")
    state = store.asset(AssetScope(name="marks"))
    # The poison window's advance was dropped with it; the next kept offset advanced it.
    assert [state.get(f"last_seen/{p}") for p in range(2)] == [38, 38]
    assert sink.figures.events_written == 2 * 19 and sink.figures.windows_rejected == 2
    await sink.drain(5)
    await manager.stop_all()
    await asyncio.gather(task, return_exceptions=True)
    await sink.aclose()
    store.close()
