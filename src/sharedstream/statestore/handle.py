"""What the accessors and the unit of work need from their store, as a Protocol.

``StateStore`` builds accessors and units of work, and they call back into it (its
backend, settings, clock, engine and thread pool). Naming those needs here, below all
three, keeps the accessor and unit-of-work files from importing ``store.py``: each can
be read, and tested with any object that has these members, on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import ParamSpec, Protocol, TypeVar

from sqlalchemy.engine import Engine

from sharedstream.statestore.backend import StateBackend
from sharedstream.statestore.settings import StateStoreSettings

P = ParamSpec("P")
R = TypeVar("R")


class StoreHandle(Protocol):
    """The members of ``StateStore`` that accessors and units of work use."""

    @property
    def engine(self) -> Engine: ...

    @property
    def settings(self) -> StateStoreSettings: ...

    @property
    def backend(self) -> StateBackend: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    async def run_async(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking ``fn`` off the event loop."""
        ...
