"""What ``/status`` and ``/metrics`` read of a running triggerer: a small Protocol.

``status.py`` and ``metrics.py`` take this, not ``process.TriggererRuntime``, so neither imports
the process module (which builds both): the three are no import circle. ``TriggererRuntime``
satisfies it as it is; a test can hand in anything with these parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sharedstream.core.manager import SharedStreamManager
    from sharedstream.delivery.service import DeliveryService
    from sharedstream.serde.registries import SchemaRegistries
    from sharedstream.triggerer.heartbeat import Heartbeat
    from sharedstream.triggerer.loopwatch import LoopWatchdog
    from sharedstream.triggerer.plan import Plan
    from sharedstream.uow.sink import DatabaseWorkSink


class TriggererView(Protocol):
    @property
    def plan(self) -> Plan: ...

    @property
    def manager(self) -> SharedStreamManager: ...

    @property
    def sink(self) -> DatabaseWorkSink: ...

    @property
    def delivery(self) -> DeliveryService | None: ...

    @property
    def heartbeat(self) -> Heartbeat | None: ...

    @property
    def watchdog(self) -> LoopWatchdog | None: ...

    @property
    def registries(self) -> SchemaRegistries | None: ...

    def readiness(self) -> list[str]: ...
