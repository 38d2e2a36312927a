"""Every configured destination's deliverer, in one asyncio task group.

``sharedstream run`` starts it beside ingestion (unless ``--no-delivery``), and
``sharedstream deliver`` runs it alone, to scale delivery out or keep it apart. Either
way each destination is delivered by one process at a time (its lease), so any number
of processes may carry the same ``[destinations]``.

It never slows ingestion: its database calls run on its own thread and connections,
and a destination that is down only holds its own cursor.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy.engine import Engine

from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.delivery.deliverer import Deliverer, DestinationState
from sharedstream.delivery.sender import Sender
from sharedstream.delivery.settings import (
    AirflowDestination,
    DestinationSettings,
    KafkaDestination,
    WebhookDestination,
)
from sharedstream.delivery.wakeup import Wakeup, listen
from sharedstream.kafka.connections import resolve_connection


def make_sender(destination: DestinationSettings,
                airflow: Mapping[str, AirflowInstanceSettings],
                connections: Mapping[str, Mapping[str, Any]]) -> Sender:
    """The sender of ``destination``'s kind; a ValueError names what is missing."""
    options = destination.options
    if isinstance(options, WebhookDestination):
        from sharedstream.delivery.webhook import WebhookSender
        return WebhookSender(options)
    if isinstance(options, AirflowDestination):
        instance = airflow.get(options.instance)
        if instance is None:
            raise ValueError(f"destination {destination.id!r}: no [airflow.{options.instance}] "
                             "section for its instance")
        from sharedstream.delivery.airflow import AirflowSender
        return AirflowSender(options, instance)
    assert isinstance(options, KafkaDestination)
    from sharedstream.delivery.kafka_topic import KafkaTopicSender
    return KafkaTopicSender(options, resolve_connection(options.connection, connections))


class DeliveryService:
    """Runs one :class:`Deliverer` per destination until stopped."""

    def __init__(self, engine: Engine, senders: Mapping[str, tuple[DestinationSettings, Sender]]
                 ) -> None:
        self._engine = engine
        self._senders = senders
        self.wakeup = Wakeup()
        self.deliverers: list[Deliverer] = []
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="delivery")

    @classmethod
    def from_config(cls, engine: Engine, destinations: Mapping[str, DestinationSettings],
                    airflow: Mapping[str, AirflowInstanceSettings],
                    connections: Mapping[str, Mapping[str, Any]]) -> DeliveryService:
        return cls(engine, {dest_id: (dest, make_sender(dest, airflow, connections))
                            for dest_id, dest in destinations.items()})

    async def close(self) -> None:
        """Close the senders without running (after ``sharedstream check`` built them)."""
        for _dest, sender in self._senders.values():
            await sender.aclose()

    def states(self) -> list[DestinationState]:
        return [d.state for d in self.deliverers]

    async def run(self, stop: asyncio.Event) -> None:
        self.deliverers = [
            Deliverer(dest, sender, self._engine, self._executor, self.wakeup.waiter())
            for dest, sender in self._senders.values()]
        halt = threading.Event()
        listener = None
        if self._engine.dialect.name == "postgresql":
            listener = threading.Thread(target=listen, args=(self._engine, self.wakeup, halt),
                                        name="delivery-listen", daemon=True)
            listener.start()
        try:
            await asyncio.gather(*(d.run(stop) for d in self.deliverers))
        finally:
            halt.set()
            for d in self.deliverers:
                await d.sender.aclose()
            self._executor.shutdown(wait=False)
