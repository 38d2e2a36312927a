"""``StateStore``: the programmatic entry to both state stores."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar, cast

from sqlalchemy import select, update
from sqlalchemy.engine import Engine

from sharedstream.statestore import maintenance, migrate
from sharedstream.statestore.accessors import AssetState, TaskState
from sharedstream.statestore.backend import StateBackend
from sharedstream.statestore.database import DatabaseBackend
from sharedstream.statestore.engine import make_engine
from sharedstream.statestore.loading import load_class
from sharedstream.statestore.models import asset, asset_event
from sharedstream.statestore.payload import FilesystemPayloadBackend, PayloadBackend
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.settings import StateStoreSettings
from sharedstream.statestore.sql import insert_if_absent, upsert
from sharedstream.statestore.types import utcnow
from sharedstream.statestore.uow import UnitOfWork

# Rows per statement of a bulk registration: inside every backend's limit on bound values.
_BULK = 500

P = ParamSpec("P")
R = TypeVar("R")

PAYLOAD_ALIASES: dict[str, type[PayloadBackend]] = {"filesystem": FilesystemPayloadBackend}


def _payload_backend(settings: StateStoreSettings) -> PayloadBackend | None:
    if settings.payload_backend is None:
        return None
    cls = PAYLOAD_ALIASES.get(settings.payload_backend.strip()) or cast(
        type[PayloadBackend],
        load_class(settings.payload_backend, PayloadBackend, "[workers] state_backend"),
    )
    return cls(settings)


class StateStore:
    """Both state stores over one database.

    Blocking methods run on the caller's thread; ``run_async`` (and every accessor's
    ``a*`` twin) runs them on this store's own pool of ``async_workers`` threads.
    """

    def __init__(
        self,
        engine: Engine,
        settings: StateStoreSettings | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        async_workers: int = 8,
    ) -> None:
        self.engine = engine
        self.settings = settings or StateStoreSettings()
        self.clock = clock
        self._executor = ThreadPoolExecutor(async_workers, thread_name_prefix="statestore")
        payload = _payload_backend(self.settings)
        self.backend: StateBackend
        if self.settings.backend is None:
            self.backend = DatabaseBackend(
                engine=engine, settings=self.settings, clock=clock, payload=payload
            )
        else:
            if payload is not None:
                raise ValueError(
                    "[workers] state_backend works with the default [state_store] backend only"
                )
            cls = cast(
                type[StateBackend],
                load_class(self.settings.backend, StateBackend, "[state_store] backend"),
            )
            self.backend = cls(engine=engine, settings=self.settings, clock=clock)

    @classmethod
    def from_url(
        cls, url: str, settings: StateStoreSettings | None = None, *, must_exist: bool = False,
        **kwargs: Any
    ) -> StateStore:
        """A store on the database at ``url`` (SQLAlchemy URL, e.g. ``sqlite:///x.db``);
        ``must_exist``: refuse to create a SQLite file (see ``make_engine``)."""
        settings = settings or StateStoreSettings()
        engine = make_engine(url, must_exist=must_exist,
                             sqlite_busy_timeout=settings.sqlite_busy_timeout)
        return cls(engine, settings, **kwargs)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.engine.dispose()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def run_async(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking ``fn`` on the store's threads, never on the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    # -- schema -----------------------------------------------------------------------------

    def upgrade(self, revision: str = "head") -> None:
        migrate.upgrade(self.engine, revision)

    def downgrade(self, revision: str = "base") -> None:
        migrate.downgrade(self.engine, revision)

    def revision(self) -> str | None:
        return migrate.current_revision(self.engine)

    # -- accessors --------------------------------------------------------------------------

    def task(self, scope: TaskScope) -> TaskState:
        return TaskState(self, scope)

    def asset(self, scope: AssetScope, writer: Writer | None = None) -> AssetState:
        return AssetState(self, scope, writer or Writer.api())

    def unit_of_work(self) -> UnitOfWork:
        return UnitOfWork(self)

    def mark_task_success(self, scope: TaskScope) -> bool:
        """Apply ``clear_on_success``: True if the scope's keys were cleared."""
        if not self.settings.clear_on_success:
            return False
        self.backend.task_clear(scope, all_map_indices=False)
        return True

    # -- asset lifecycle --------------------------------------------------------------------

    def register_asset(self, name: str, uri: str | None = None) -> int:
        """Create or reactivate asset ``name``; return its id."""
        now = self.clock()
        with self.engine.begin() as connection:
            inserted = insert_if_absent(connection, asset, {
                "name": name, "uri": uri, "active": True, "deactivated_at": None,
                "created_at": now, "updated_at": now,
            })
            if not inserted:
                connection.execute(update(asset).where(asset.c.name == name).values(
                    uri=uri, active=True, deactivated_at=None, updated_at=now))
            return int(connection.execute(
                select(asset.c.id).where(asset.c.name == name)).scalar_one())

    def register_assets(self, assets: Iterable[tuple[str, str | None]]) -> dict[str, int]:
        """:meth:`register_asset` for many ``(name, uri)`` at once: one transaction, an
        upsert and a lookup per thousand names, not a transaction per asset (10,000
        watchers' assets took 20 s one by one on SQLite). ``{name: id}``."""
        now = self.clock()
        declared = dict(assets)  # a name once: an upsert may not touch a row twice
        rows = [{"name": name, "uri": uri, "active": True, "deactivated_at": None,
                 "created_at": now, "updated_at": now} for name, uri in declared.items()]
        names = list(declared)
        ids: dict[str, int] = {}
        with self.engine.begin() as connection:
            for start in range(0, len(rows), _BULK):
                upsert(connection, asset, rows[start:start + _BULK], conflict=("name",),
                       update=("uri", "active", "deactivated_at", "updated_at"))
            for start in range(0, len(names), _BULK):
                found = connection.execute(select(asset.c.name, asset.c.id).where(
                    asset.c.name.in_(names[start:start + _BULK])))
                ids.update((str(name), int(id_)) for name, id_ in found)
        return ids

    def deactivate_asset(self, name: str) -> bool:
        """Mark an asset inactive (its state is kept until swept); True if it was active."""
        now = self.clock()
        with self.engine.begin() as connection:
            result = connection.execute(
                update(asset).where(asset.c.name == name, asset.c.active.is_(True))
                .values(active=False, deactivated_at=now, updated_at=now))
        return result.rowcount > 0

    def delete_asset(self, name: str) -> bool:
        """Delete an asset row, its events and its state, in one transaction.

        The state goes by ON DELETE CASCADE; events have no foreign key (migration 0006),
        so they are deleted here. A triggerer still writing events for the asset after
        this commits writes rows no read shows (every read joins ``asset``), until
        ``events clean`` ages them out."""
        ids = select(asset.c.id).where(asset.c.name == name).scalar_subquery()
        with self.engine.begin() as connection:
            connection.execute(asset_event.delete().where(asset_event.c.asset_id == ids))
            result = connection.execute(asset.delete().where(asset.c.name == name))
        return result.rowcount > 0

    # -- operations -------------------------------------------------------------------------

    def _database_backend(self, what: str) -> DatabaseBackend:
        if not isinstance(self.backend, DatabaseBackend):
            raise NotImplementedError(f"{what} is not available with a custom backend")
        return self.backend

    def cleanup(
        self, dry_run: bool = False, batch_size: int | None = None
    ) -> maintenance.CleanupReport:
        """Delete expired task rows (see ``maintenance.cleanup``); a custom backend is
        skipped with a message in ``report.skipped``, since its storage is not ours."""
        if not isinstance(self.backend, DatabaseBackend):
            return maintenance.CleanupReport(
                0, 0, 0.0, dry_run=dry_run,
                skipped=f"custom backend {self.settings.backend}: cleanup skipped "
                        "(expire rows with the backend's own tools)",
            )
        size = self.settings.state_cleanup_batch_size if batch_size is None else batch_size
        if size < 0:
            raise ValueError("batch_size must be >= 0")
        return maintenance.cleanup(self.backend, size, dry_run)

    def sweep(self, inactive_for: timedelta, dry_run: bool = False) -> maintenance.SweepReport:
        return maintenance.sweep(self._database_backend("sweep"), inactive_for, dry_run)

    def orphans(
        self, delete: bool = False, min_age: timedelta = timedelta(minutes=1)
    ) -> maintenance.OrphanReport:
        return maintenance.orphans(self._database_backend("orphans"), delete, min_age)

    def stats(self) -> dict[str, Any]:
        return maintenance.stats(self._database_backend("stats"))


