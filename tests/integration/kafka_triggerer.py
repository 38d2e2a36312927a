"""One group of watchers run in-process on the triggerer's own path, for the integration
tests on the real broker and a real database: the Kafka runtime's connection ``k`` (its own
``group.id``, rejections recorded in the store), a ``SharedStreamManager`` over a
``DatabaseWorkSink``, each watcher's asset state, one task per watcher.

The Kafka runtime is process-wide: it is put back as it was when the block ends, however it
ends, so a failed test does not leave its connection to the tests after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from kafka_probe import committed_partitions
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.kafka.runtime import configure_kafka_runtime, kafka_runtime
from sharedstream.statestore import StateStore
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger
from sharedstream.uow.rejections import DatabaseRejectionRecorder
from sharedstream.uow.sink import DatabaseWorkSink

# Retries that cost the tests little time: a redelivery comes within a fifth of a second.
QUICK_RETRIES = ManagerSettings(retry_backoff_initial=0.05, retry_backoff_max=0.2)


@dataclass(frozen=True)
class Running:
    sink: DatabaseWorkSink
    manager: SharedStreamManager
    states: dict[str, WatcherStateAccess]  # watcher name -> its asset state
    bootstrap: str
    group_id: str

    async def until_committed(self, topic: str, ends: list[int], within: float) -> None:
        """Wait until the group's committed offsets of ``topic``'s partitions are ``ends``
        (read from outside the group); fail with the offsets reached after ``within`` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        offsets: list[int] = []
        while offsets != ends:
            assert loop.time() < deadline, f"committed {offsets}"
            await asyncio.sleep(0.1)
            offsets = [tp.offset for tp in await asyncio.to_thread(
                committed_partitions, self.bootstrap, f"{self.group_id}.{topic}", topic,
                len(ends))]


@asynccontextmanager
async def running_group(bootstrap: str, store: StateStore, group_id: str,
                        triggers: Mapping[str, KafkaSharedStreamTrigger],
                        assets: Mapping[str, str] | None = None, *,
                        process: ProcessSettings | None = None,
                        settings: ManagerSettings = QUICK_RETRIES,
                        **sink_options: Any) -> AsyncIterator[Running]:
    """Run ``triggers`` (watcher name -> trigger on connection ``k``, one shared stream)
    until the block ends.

    ``assets`` names each watcher's asset (by default the watcher's own name); they are
    registered here. ``process`` and ``sink_options`` go to the sink, ``settings`` to the
    manager. A block that ends normally has the sink drained first, so what its watchers
    emitted is in the database when it returns; one that raises is not (a sink stuck on
    the defect under test would hold the failure for the drain's 30 s). Then the manager
    stops, its watcher tasks end, the sink closes and the runtime is put back.
    """
    before = kafka_runtime()
    configure_kafka_runtime({"k": {"bootstrap.servers": bootstrap, "group.id": group_id}},
                            DatabaseRejectionRecorder(store))
    names = {watcher: (assets or {}).get(watcher, watcher) for watcher in triggers}
    ids = {watcher: store.register_asset(name) for watcher, name in names.items()}
    sink = DatabaseWorkSink(store, ids, process, **sink_options)
    manager = SharedStreamManager(sink, settings)
    states = {watcher: WatcherStateAccess(store, watcher, names[watcher], ids[watcher])
              for watcher in triggers}
    for watcher, trigger in triggers.items():
        trigger.asset_state_store = states[watcher]
    manager.declare_cohort(next(iter(triggers.values())).shared_stream_key(), triggers,
                           {name: trigger.match for name, trigger in triggers.items()})
    tasks = [asyncio.create_task(manager.run_watcher(n, t)) for n, t in triggers.items()]
    try:
        yield Running(sink, manager, states, bootstrap, group_id)
        await sink.drain(30)
    finally:
        await manager.stop_all()
        await asyncio.gather(*tasks, return_exceptions=True)
        await sink.aclose()
        configure_kafka_runtime(before.connections, before.recorder, before.environ)
