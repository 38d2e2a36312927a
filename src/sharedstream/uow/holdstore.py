"""The database as the :class:`~sharedstream.core.holds.HoldStore` of a triggerer.

Read on the consumer thread when partitions are assigned (``kafka/rebalance.py``), in a
transaction of its own on the store's pool (never the unit-of-work writer's connection,
which belongs to the writer thread). Writing is the unit of work's job
(``uow/transaction.py``), in its own transaction.

Failure window: an error here is retried by the caller until the database answers; its
message names the database error without the URL (no secret reaches a log line).
"""

from __future__ import annotations

from collections.abc import Sequence

from sharedstream.statestore.engine import describe_error
from sharedstream.statestore.holds import load_holds
from sharedstream.statestore.store import StateStore


class HoldsUnavailable(RuntimeError):
    """The holds could not be read (the database did not answer, say)."""


class DatabaseHoldStore:
    def __init__(self, store: StateStore) -> None:
        self._store = store

    def load(self, consumer_group: str, partitions: Sequence[tuple[str, int, int | None]]
             ) -> dict[tuple[str, int], dict[int, frozenset[str]]]:
        try:
            with self._store.engine.begin() as connection:
                return load_holds(connection, consumer_group, partitions)
        except Exception as exc:
            raise HoldsUnavailable(describe_error(exc)) from None
