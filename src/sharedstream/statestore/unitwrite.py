"""The unit-of-work writer: a unit's staged state written inside the caller's transaction.

``apply_staged`` runs in the transaction a :class:`~sharedstream.statestore.uow.UnitOfWork`
commits together with its steps (the triggerer's events), with few statements per unit:
per task scope one clear, one multi-key delete and one multi-row upsert; per asset the
same, then every advance at once (``compareswap.py``). Asset ids (the triggerer names its
assets by id) are checked once and remembered, up to ``MAX_LIVE_ASSET_IDS``.

Invariants: nothing done after commit (removing deleted payload objects, remembering
watermarks) runs before the caller's transaction committed: the returned callables.

Failure windows: a rollback leaves no row and loses no payload object of a deleted key.
Payload objects of set keys are written, under their rows' locks, to the slot each row
does not reference, so a rollback changes no object a row references and has nothing to
undo: a written slot is an orphan the key's next write overwrites. An apply that fails
midway removes the objects it wrote at once, its locks still held. A crash after the
commit and before the callables ran leaves orphan objects (``state-store orphans``) and
nothing remembered, which costs the next unit a count and a locked read. An asset deleted while its
id is remembered fails the unit on the foreign key, turned back into the lookup error a
fresh check raises (:meth:`UnitWriter._forget_missing`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from sqlalchemy import and_, delete, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from sharedstream.statestore.compareswap import CompareSwap, Watermark
from sharedstream.statestore.models import asset, asset_state_store, task_state_store
from sharedstream.statestore.scopes import AssetScope, TaskScope
from sharedstream.statestore.staging import StagedAdvance, StagedDelete, StagedSet, StagedWrites
from sharedstream.statestore.staterows import SlotWrite, task_scope_filter

AfterCommit = Callable[[], None]

# Asset ids remembered as existing: past the bound the backend forgets them all and
# checks again, which costs one query.
MAX_LIVE_ASSET_IDS = 10_000


class UnitWriter(CompareSwap):
    """The unit-of-work half of :class:`~sharedstream.statestore.database.DatabaseBackend`."""

    _live_asset_ids: set[int]

    def apply_staged(self, connection: Connection, staged: StagedWrites) -> list[AfterCommit]:
        """Write ``staged`` inside the caller's transaction with few statements: per scope
        one clear, one multi-key delete, one multi-row upsert; advances are re-checked
        under a row lock, or guarded by the row remembered from the last commit (see
        :meth:`_apply_advances`). Payload objects of deleted keys and the old slots of set
        ones are removed, and the rows left by this unit's advances remembered, only after
        the caller commits (the returned callables), so a rollback never loses a payload
        nor leaves a row remembered that was never committed. Nothing here opens another
        connection while the caller's transaction is open (in-memory SQLite has one)."""
        written: list[SlotWrite] = []
        try:
            refs = self._apply_tasks(connection, staged, written)
            asset_ids = self._asset_ids(connection, list(staged.assets))
            try:
                marks = self._apply_assets(connection, staged, asset_ids)
            except IntegrityError as exc:
                gone = self._forget_missing(asset_ids.values())
                if gone:
                    raise LookupError(f"no asset id={gone[0]}; it was deleted while in use, "
                                      "only name= creates an asset") from exc
                raise
        except BaseException:
            self.drop_written(written)  # the caller has not rolled back: locks still held
            raise
        after: list[AfterCommit] = [lambda: self._remember(marks)] if marks else []
        if written:
            after.append(lambda: self.release_old_slots(written))
        if refs:
            after.append(lambda: self.delete_payloads(refs))
        return after

    def _apply_tasks(self, connection: Connection, staged: StagedWrites,
                     written: list[SlotWrite]) -> list[str]:
        """The task part of :meth:`apply_staged`: the payload refs of deleted rows to
        remove after the commit; ``written`` gets the slots written for set keys."""
        refs: list[str] = []
        prior: dict[tuple[TaskScope, str], str] = {}  # deleted rows' committed references
        for group in sorted(staged.cleared_task_groups):
            refs += self.delete_task_rows(
                connection, task_scope_filter(TaskScope(*group), all_map_indices=True), prior
            )[1]
        for task_scope, task in staged.tasks.items():
            refs += self._apply_task(connection, task_scope, task.cleared, task.ops, written,
                                     prior)
        return refs

    def _apply_assets(self, connection: Connection, staged: StagedWrites,
                      asset_ids: dict[AssetScope, int]) -> dict[tuple[int, str], Watermark]:
        """The asset part of :meth:`apply_staged`; the watermarks to remember after commit."""
        advances: list[tuple[int, str, StagedAdvance]] = []
        s = asset_state_store.c
        for asset_scope, asset_staging in staged.assets.items():
            asset_id = asset_ids[asset_scope]
            if asset_staging.cleared:
                connection.execute(delete(asset_state_store).where(s.asset_id == asset_id))
            ops = asset_staging.ops
            deleted = [k for k, op in ops.items() if isinstance(op, StagedDelete)]
            if deleted:
                connection.execute(delete(asset_state_store).where(
                    s.asset_id == asset_id, s.key.in_(deleted)))
            rows = [self._asset_row(asset_id, k, op.text, op.writer)
                    for k, op in ops.items() if isinstance(op, StagedSet) and op.writer]
            self._upsert_asset_rows(connection, rows)
            advances += [(asset_id, k, op) for k, op in ops.items()
                         if isinstance(op, StagedAdvance)]
        return self._apply_advances(connection, advances)

    def _forget_missing(self, asset_ids: Collection[int]) -> list[int]:
        """Which of ``asset_ids`` no longer exist (read on a connection of its own: the
        failed transaction may not run another statement); forget them, and return them.

        An id is remembered once seen, so a unit of work writing state for an asset deleted
        since fails on ``asset_state_store``'s foreign key, a constraint error, which the
        writer would dead-letter; this turns it back into the "no asset" lookup error a
        fresh check raises, which the writer holds and retries."""
        with self.engine.connect() as connection:
            found = set(connection.execute(
                select(asset.c.id).where(asset.c.id.in_(sorted(set(asset_ids))))).scalars())
        gone = sorted(set(asset_ids) - found)
        for asset_id in gone:
            self._live_asset_ids.discard(asset_id)
        if gone:
            self._watermarks.clear()
        return gone

    def _asset_ids(self, connection: Connection,
                   scopes: Sequence[AssetScope]) -> dict[AssetScope, int]:
        """Resolve every scope of a unit; scopes given by id (the triggerer's) in one query,
        or none once every id has been seen to exist (remembered for the backend's life).

        An id that does not exist, and every scope by name or uri, goes through
        :meth:`asset_id`, which creates a named asset or raises for an unknown id. A
        remembered id whose asset was deleted since is caught by the state rows' foreign
        key instead (see :meth:`_forget_missing`).
        """
        by_id = {scope.asset_id for scope in scopes if scope.asset_id is not None}
        unchecked = by_id - self._live_asset_ids
        if unchecked:
            exist = set(connection.execute(
                select(asset.c.id).where(asset.c.id.in_(sorted(unchecked)))).scalars())
            if len(self._live_asset_ids) + len(exist) > MAX_LIVE_ASSET_IDS:
                self._live_asset_ids.clear()
            self._live_asset_ids |= exist
        known = by_id & self._live_asset_ids
        resolved: dict[AssetScope, int] = {}
        for scope in scopes:
            found = scope.asset_id if scope.asset_id in known else None
            if found is None:
                found = self.asset_id(connection, scope, create=True)
                assert found is not None
            resolved[scope] = found
        return resolved

    def _apply_task(self, connection: Connection, scope: TaskScope, cleared: bool,
                    ops: dict[str, StagedSet | StagedDelete],
                    written: list[SlotWrite],
                    prior: dict[tuple[TaskScope, str], str]) -> list[str]:
        t = task_state_store.c
        refs: list[str] = []
        if cleared:
            refs += self.delete_task_rows(connection, task_scope_filter(scope), prior)[1]
        deleted = [k for k, op in ops.items() if isinstance(op, StagedDelete)]
        if deleted:
            refs += self.delete_task_rows(
                connection, and_(task_scope_filter(scope), t.key.in_(deleted)), prior)[1]
        writes = [(k, op.text, op.expires_at) for k, op in ops.items()
                  if isinstance(op, StagedSet)]
        if writes:
            written += self.write_task_rows(connection, scope, writes, prior)
        return refs
