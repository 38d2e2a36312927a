"""A batch filter must be a coroutine function: anything else is refused at start-up,
naming the watcher and the fix (issue 27). Before the check, an async generator
``filter_shared_batch`` was called per batch, never ran its body, and acked every
message without an event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger, MessageBatch, TriggerEvent
from sharedstream.triggerer.loading import WatcherLoadError, check_assets

pytestmark = pytest.mark.unit


class Yields(KafkaSharedStreamTrigger):
    async def filter_shared_batch(self, batch: MessageBatch) -> AsyncIterator[TriggerEvent]:
        for msg in batch:
            yield TriggerEvent(msg.offset)


class Plain(KafkaSharedStreamTrigger):
    def filter_shared_batch(self, batch: MessageBatch) -> None:
        return None


class Good(KafkaSharedStreamTrigger):
    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        for msg in batch:
            batch.emit(msg, TriggerEvent(msg.offset))


def assets(cls: Any) -> list[Asset]:
    return [Asset("orders", watchers=[AssetWatcher("w", cls(topics=["orders"]))])]


@pytest.mark.parametrize("cls", [Yields, Plain])
def test_a_batch_filter_that_is_not_a_coroutine_function_is_refused(cls: Any) -> None:
    with pytest.raises(WatcherLoadError) as refused:
        check_assets("mod", assets(cls))
    message = str(refused.value)
    assert f"watcher 'w': {cls.__qualname__}.filter_shared_batch is not a coroutine" in message
    assert "batch.emit(message, event)" in message


def test_a_coroutine_batch_filter_passes() -> None:
    check_assets("mod", assets(Good))
