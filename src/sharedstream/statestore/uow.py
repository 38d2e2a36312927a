"""Units of work: state writes committed in the caller's transaction, with its own rows.

Usage (the triggerer commits a message's events and its watcher's state together)::

    uow = store.unit_of_work()
    state = store.asset(AssetScope(name="orders"), writer=Writer.watcher("w")).bound(uow)
    if state.advance("last_seen/0", 1042):    # staged; state.get() now sees 1042
        ...
    uow.add_step(lambda conn: conn.execute(insert(asset_event), rows))
    uow.commit()                              # one transaction: state + steps

or, inside a transaction the caller owns::

    with engine.begin() as conn:
        uow.apply(conn)
    uow.committed()        # after the commit returned (uow.discard() after a rollback)

Failure windows: ``apply`` writes into the caller's transaction; until that commits,
nothing is visible to other connections, and a rollback leaves nothing behind but the
payload objects of set keys, which no row references (orphans the key's next write
overwrites, see ``sharedstream.statestore.payload``); so applying a unit again, when a
writer retries its transaction, has nothing of the first attempt to undo. A staged
``advance`` is re-checked under a row lock at apply time and dropped if another writer
has moved the key further meanwhile: the commit succeeds, the key keeps the larger value.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

from sqlalchemy.engine import Connection

from sharedstream.statestore.handle import StoreHandle
from sharedstream.statestore.staging import StagedWrites

log = logging.getLogger(__name__)

Step = Callable[[Connection], None]


class UnitOfWork:
    """A staging buffer for bound accessors plus extra steps, applied in one transaction.

    Thread-safe: async accessors stage from worker threads. Not reusable across
    transactions concurrently: apply, then ``committed()`` or ``discard()``, then reuse.
    """

    def __init__(self, store: StoreHandle) -> None:
        self._store = store
        self.lock = threading.RLock()
        self.staged = StagedWrites()
        self._steps: list[Step] = []
        self._after_commit: list[Callable[[], None]] = []

    def __len__(self) -> int:
        """Staged state operations (not counting steps)."""
        with self.lock:
            return len(self.staged)

    def add_step(self, step: Step) -> None:
        """Run ``step(connection)`` inside the transaction, after the staged state writes."""
        with self.lock:
            self._steps.append(step)

    def apply(self, connection: Connection) -> None:
        """Write everything staged into ``connection``'s open transaction (no commit)."""
        with self.lock:
            self._after_commit = self._store.backend.apply_staged(connection, self.staged)
            for step in self._steps:
                step(connection)

    def committed(self) -> None:
        """Tell the unit its transaction committed: run post-commit cleanup, then reset.

        Never raises: what committed stays committed, and a caller that saw an error here
        (the triggerer's writer) would retry or dead-letter work that is already durable.
        A cleanup that fails (a payload object that cannot be removed) is logged and
        leaves an orphan, which ``state-store orphans --delete`` removes."""
        with self.lock:
            actions = self._after_commit
            self._reset()
        for action in actions:
            try:
                action()
            except Exception as exc:
                log.warning("unit of work committed, but its cleanup failed (%s: %s); "
                            "payload objects may be left as orphans: state-store orphans "
                            "--delete removes them", type(exc).__name__, exc)

    def discard(self) -> None:
        """Drop everything staged (after a rollback, or to abandon the unit)."""
        with self.lock:
            self._reset()

    def _reset(self) -> None:
        self.staged = StagedWrites()
        self._steps = []
        self._after_commit = []

    def commit(self) -> None:
        """Apply in a new transaction and commit; on failure roll back, discard, re-raise."""
        try:
            with self._store.engine.begin() as connection:
                self.apply(connection)
        except BaseException:
            self.discard()
            raise
        self.committed()

    async def acommit(self) -> None:
        await self._store.run_async(self.commit)

    def __enter__(self) -> UnitOfWork:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()
