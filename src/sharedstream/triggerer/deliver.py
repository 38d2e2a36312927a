"""``sharedstream deliver``: the destinations alone, no ingestion, until a signal.

Any number of these may run beside ``run --no-delivery`` processes: each destination
is delivered by one process at a time (a lease in the database, see
:mod:`sharedstream.delivery.service`). The process is watched as ``run`` is: the
loop watchdog and the health server, whose readiness names the database and every
failing destination.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry

from sharedstream.delivery.service import DeliveryService
from sharedstream.statestore import StateStore
from sharedstream.triggerer.config import Config, ProcessSettings
from sharedstream.triggerer.health import HealthServer
from sharedstream.triggerer.loopwatch import LoopWatchdog
from sharedstream.triggerer.metrics import DeliveryCollector
from sharedstream.triggerer.plan import StartupError
from sharedstream.triggerer.process import EXIT_OK, run_with_signals
from sharedstream.triggerer.readiness import database_problems, destination_problems
from sharedstream.triggerer.startup import connect, delivery_service, health_check

log = logging.getLogger(__name__)


def run_delivery(config: Config) -> int:
    """The whole ``sharedstream deliver``: the destinations alone, until a signal."""
    if not config.destinations:
        raise StartupError("no [destinations.<id>] configured: nothing to deliver")
    health_check(config.process)
    store = connect(config, upgrade=False)
    try:
        delivery = delivery_service(store, config)

        async def deliver(stop: asyncio.Event) -> int:
            await deliver_alone(delivery, store, config.process, stop)
            return EXIT_OK

        return asyncio.run(run_with_signals(deliver))
    finally:
        store.close()


async def deliver_alone(delivery: DeliveryService, store: StateStore,
                        process: ProcessSettings, stop: asyncio.Event) -> None:
    """Run ``delivery`` until ``stop``, seen as ``run`` is: the loop watchdog, and
    ``/livez``, ``/readyz`` (database answering, every destination delivering, the loop
    not blocked) and ``/metrics`` on ``[triggerer] health_host``/``health_port``."""
    watchdog = LoopWatchdog(asyncio.get_running_loop(), process.loop_block_timeout)
    watchdog.start()
    health = None
    try:
        if process.health_port >= 0:
            registry = CollectorRegistry()
            registry.register(DeliveryCollector(delivery, watchdog))
            health = HealthServer(registry, lambda: [*database_problems(store),
                                                     *destination_problems(delivery),
                                                     *watchdog.problems()],
                                  process.health_host, process.health_port)
            health.start()
            log.info("health and metrics on http://%s:%d/ (livez, readyz, metrics)",
                     process.health_host, health.port)
        await delivery.run(stop)
    finally:
        if health is not None:
            health.stop()
        watchdog.stop()
