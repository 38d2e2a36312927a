"""The embedded API on a real broker and PostgreSQL: the triggerer dies while its host works.

A host runs ``async with Triggerer(config, assets=...)`` around work of its own and
never awaits ``wait()``. One watcher's group cannot be built (its trigger's
``create_shared_stream_producer`` raises: terminal, as ``run`` treats it), so the
triggerer stops by itself after a clean shutdown. The host must learn it then, not
whenever it happens to leave the block: its block is cancelled, as an
``asyncio.TaskGroup`` cancels its body when a child fails, and leaving it raises
``TriggererFailed`` with the fatal error as its cause. A host that awaits ``wait()``
instead gets the exit code and is not cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from db_schemas import postgres_schema_url

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
from sharedstream.core.streamconfig import ProducerFactoryError
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.triggerer import (
    Config,
    DatabaseSettings,
    ProcessSettings,
    Triggerer,
    TriggererFailed,
)


class UnbuildableSource(KafkaSharedStreamTrigger):
    """A trigger whose group's producer cannot be built (its own settings are refused)."""

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]
                                      ) -> KafkaSharedStreamProducer:
        raise ValueError("source settings refused")


@pytest.fixture
def postgres_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


@pytest.fixture
def config(postgres_url: str, connection: dict[str, Any]) -> Config:
    return Config(database=DatabaseSettings(url=postgres_url),
                  process=ProcessSettings(health_port=-1, shutdown_timeout=30.0),
                  connections={"e2e": connection})


def assets(topic: str) -> list[Asset]:
    return [Asset("broken", watchers=[AssetWatcher("unbuildable", UnbuildableSource(
        topics=[topic], kafka_config_id="e2e"))])]


async def test_a_fatal_error_cancels_the_host_block_and_raises_triggerer_failed(
        config: Config, create_topic: Any) -> None:
    topic = create_topic("embedded-fatal")
    embedded: list[Triggerer] = []
    ticks = 0

    async def service() -> None:
        """The host: its own periodic work, never awaiting the triggerer."""
        nonlocal ticks
        async with Triggerer(config, assets=assets(topic)) as triggerer:
            embedded.append(triggerer)
            entered.set()
            while True:
                ticks += 1
                await asyncio.sleep(0.02)

    entered = asyncio.Event()
    host = asyncio.create_task(service())
    # Entering runs the start-up checks in a thread; a refused start ends the host instead.
    await asyncio.wait({host, asyncio.create_task(entered.wait())},
                       return_when=asyncio.FIRST_COMPLETED)
    assert embedded, f"the block was never entered: {host!r}"
    assert await embedded[0].wait() == 1  # another task watching: the exit code
    assert host.done() or host.cancelling(), \
        "the triggerer failed and its host's block kept running"
    with pytest.raises(TriggererFailed) as failed:
        await host
    assert isinstance(failed.value.__cause__, ProducerFactoryError)
    assert "source settings refused" in str(failed.value)
    assert embedded[0].failure is failed.value.__cause__
    assert ticks > 0


async def test_a_host_awaiting_wait_gets_the_exit_code_and_is_not_cancelled(
        config: Config, create_topic: Any) -> None:
    topic = create_topic("embedded-fatal-wait")
    with pytest.raises(TriggererFailed):
        async with Triggerer(config, assets=assets(topic)) as triggerer:
            assert await triggerer.wait() == 1
            assert isinstance(triggerer.failure, ProducerFactoryError)
