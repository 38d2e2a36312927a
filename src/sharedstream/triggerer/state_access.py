"""``WatcherStateAccess``: ``trigger.asset_state_store`` of one watcher.

Inside a message window of this watcher, writes are staged into that window's unit
of work and commit with the message's events (guarantee 3); outside a window they
commit at once. Reads see, in order:

1. the open window's staged writes;
2. the staged writes of this watcher's earlier windows that the sink holds but has
   not committed yet, newest first: a watermark read on message N+1 sees message N's
   advance before N's batch commits;
3. values this watcher committed or read itself in the last ``READ_CACHE_SECONDS``;
4. the database.

A window that failed, or that the manager gave up on, stops counting at once (its
message is redelivered and the filter runs again); a confirmed one is in the
database. Between the commit and the confirmation a window is visible both in the
sink and in the database, with the same values.

Why step 3: a watermark read per message (the usual ``aget`` / ``aadvance`` pattern)
would otherwise cost a database round trip whenever the window that last wrote the
key has committed, which is most of the time: a thread hop and a query per message
that the filter waits on. The price is bounded staleness towards *other* writers
(``state-store set`` from an operator, another triggerer process advancing the same
key): their change is seen at most ``READ_CACHE_SECONDS`` later. Advances stay safe
against it either way: the commit is a forward-only compare-and-swap. Direct writes
through this object update what it knows at once.

Staged writes made after the message was rejected are dropped with it. The API is
:class:`~sharedstream.statestore.accessors.AssetState`'s (one asset-state API); this
class only overrides its hooks. The sync methods block on a database read when
nothing staged answers; the async twins answer staged hits on the loop and send
database reads and immediate writes to the store's threads.

Inside a window a database read is a wait on infrastructure
(:meth:`Window.waiting_on_infrastructure`): the manager's ack timeout does not run
while it lasts, so an outage holds the message instead of counting attempts until it
is dead-lettered. The async read retries through the outage; the sync read cannot
(it blocks the loop), so it raises :class:`InfrastructureError`, which fails the
watcher for the message without counting an attempt (redelivered after a backoff).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from sharedstream.core.backoff import Backoff
from sharedstream.core.streamconfig import InfrastructureError
from sharedstream.core.window import Window, current_window
from sharedstream.statestore.accessors import AssetState
from sharedstream.statestore.engine import describe_error, is_transient_error
from sharedstream.statestore.scopes import AssetScope, Writer
from sharedstream.statestore.staging import NOT_STAGED, AssetStaging, StagedWrites
from sharedstream.statestore.store import StateStore
from sharedstream.triggers.assets import Asset

log = logging.getLogger(__name__)

READ_RETRY_INITIAL = 0.1
READ_RETRY_CAP = 5.0
READ_CACHE_SECONDS = 1.0
"""How long a value this watcher committed or read stays the answer without the database."""


class WatcherStateAccess(AssetState):
    """The asset state of watcher ``watcher``'s asset, staged per message window.

    The API is :class:`AssetState`'s; only its hooks differ (module docstring):
    writes are staged into the watcher's open window, reads see the windows the sink
    holds and what this watcher knows, and in-window database reads wait out outages.
    ``asset`` is the watcher's Asset (or its name); ``asset_id`` its registered id
    (``store.register_asset``), which spares a name lookup per database access.

    Bigger than 25 methods: it is :class:`AssetState` (whose size says why) with its
    hooks replaced; it adds no operation of its own.
    """

    def __init__(self, store: StateStore, watcher: str, asset: Asset | str,
                 asset_id: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        asset_name = asset if isinstance(asset, str) else asset.name
        scope = (AssetScope(asset_id=asset_id) if asset_id is not None
                 else AssetScope(name=asset_name))
        super().__init__(store, scope, Writer.watcher(watcher))
        self.watcher = watcher
        self.asset_name = asset_name
        # Windows of this watcher that staged something, oldest first.
        self._windows: deque[Window] = deque()
        # key -> (valid until, value), in expiry order (the lifetime is one constant).
        self._known: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._clock = clock
        # Why in-window reads are waiting for the database (None while they answer): a
        # watcher blocked on a read submits nothing, so the sink alone would look healthy.
        self.read_failure: str | None = None

    def __getitem__(self, asset: Asset | str) -> WatcherStateAccess:
        """``self.asset_state_store[asset]``: only the watcher's own asset (Asset or name)."""
        name = asset if isinstance(asset, str) else asset.name
        if name != self.asset_name:
            raise KeyError(f"watcher {self.watcher!r} can use the state of its own asset "
                           f"{self.asset_name!r} only, not {name!r}")
        return self

    # -- windows ---------------------------------------------------------------------------

    def _window(self) -> Window | None:
        """This watcher's open window, or None outside one (write through)."""
        window = current_window()
        if window is None or window.watcher != self.watcher:
            return None
        return window

    def _writes(self, window: Window) -> StagedWrites | None:
        """The window's staged writes, created on first write; None once it is resolved.

        A bare ``StagedWrites``, not a ``UnitOfWork`` with its lock: the open window is
        staged into by the tasks of its watcher's message, and the writer thread reads it
        only after ``submit`` (the executor hand-off orders the two); the writer folds a
        batch's windows into one unit of work of its own.
        """
        if not window.is_open:
            return None  # rejected or given up: its writes go with it
        staged: StagedWrites | None = window.staged
        if staged is None:
            staged = window.staged = StagedWrites()
            self._retire()
            self._windows.append(window)
        return staged

    def _retire(self) -> None:
        """Drop resolved windows from the front; a committed one's values become known."""
        windows = self._windows
        while windows and not (windows[0].is_submitted or windows[0].is_open):
            window = windows.popleft()
            if not window.is_committed:
                continue
            staged: StagedWrites = window.staged
            staging = staged.assets.get(self.scope)
            if staging is None:
                continue
            if staging.cleared:
                self._known.clear()
            for key in staging.ops:
                self._remember(key, staging.lookup(key))

    def _remember(self, key: str, value: Any) -> None:
        known = self._known
        now = self._clock()
        known[key] = (now + READ_CACHE_SECONDS, _private(value))
        known.move_to_end(key)
        while known:
            until, _ = next(iter(known.values()))
            if until > now:
                break
            known.popitem(last=False)

    def _wrote_through(self, key: str | None) -> None:
        """A direct write changed ``key`` (None: every key): forget what was known."""
        if key is None:
            self._known.clear()
        else:
            self._known.pop(key, None)

    def _staged(self, key: str) -> Any:
        """The value staged for ``key`` (MISSING if deleted), else the one this watcher
        committed or read within ``READ_CACHE_SECONDS``, else NOT_STAGED."""
        self._retire()
        current = self._window()
        for window in reversed(self._windows):
            if window.is_submitted or (window is current and window.is_open):
                staged: StagedWrites = window.staged
                staging = staged.assets.get(self.scope)
                found = NOT_STAGED if staging is None else staging.lookup(key)
                if found is not NOT_STAGED:
                    return found
        known = self._known.get(key)
        if known is not None:
            if known[0] > self._clock():
                return _private(known[1])
            del self._known[key]
        return NOT_STAGED

    # -- AssetState's hooks ----------------------------------------------------------------

    def _writes_through(self) -> bool:
        return self._window() is None

    def _staging(self) -> AssetStaging | None:
        window = self._window()
        staged = self._writes(window) if window is not None else None
        return None if staged is None else staged.asset(self.scope)

    def _read(self, key: str) -> Any:
        window = self._window()
        if window is None:
            found = self._store.backend.asset_get(self.scope, key)
        else:
            with window.waiting_on_infrastructure():
                try:
                    found = self._store.backend.asset_get(self.scope, key)
                except Exception as exc:
                    if not is_transient_error(exc):
                        raise
                    raise InfrastructureError(
                        f"state read of {key!r}: {describe_error(exc)}") from exc
        self._remember(key, found)
        return found

    async def _aread(self, key: str) -> Any:
        """A database read; inside a window, retried while the database is unavailable.

        Raising there would fail the watcher for the message and count an attempt, so a
        long outage would end in "max attempts" dead letters; waiting holds the message
        instead, like the sink holds its batch. The whole read, retries included, is a
        wait on infrastructure: the manager's ack timeout does not cut it short.
        """
        window = self._window()
        if window is None:
            return await self._aread_retrying(key)
        with window.waiting_on_infrastructure():
            return await self._aread_retrying(key)

    async def _aread_retrying(self, key: str) -> Any:
        backoff = Backoff(READ_RETRY_INITIAL, READ_RETRY_CAP)
        while True:
            try:
                value = await self._store.run_async(self._store.backend.asset_get, self.scope,
                                                    key)
            except Exception as exc:
                if self._window() is None or not is_transient_error(exc):
                    raise
                self.read_failure = f"{type(exc).__name__} reading {key!r}"
                delay = backoff.next()
                log.warning("watcher %r: state read of %r failed (%s); retrying in %.1fs",
                            self.watcher, key, type(exc).__name__, delay)
                await asyncio.sleep(delay)
            else:
                self.read_failure = None
                self._remember(key, value)
                return value


def _private(value: Any) -> Any:
    """A copy of a JSON container (a known value is handed out many times, and a caller
    that changes what it got must not change what the next read sees); scalars as they are.
    """
    return copy.deepcopy(value) if isinstance(value, dict | list) else value
