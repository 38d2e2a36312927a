"""Compare-and-swap of asset keys: ``advance`` moves a key only forwards.

The comparison runs in Python (JSON ordering rules SQL cannot express), so every swap is
an UPDATE guarded by the version the row was read at, and matches nothing if anyone
wrote in between. One key at a time (:meth:`CompareSwap._advance_in`, retried until it
wins or finds the key not forwards), or all the advances of a unit of work at once
(:meth:`CompareSwap._apply_advances`): under row locks taken in key order, or, in the
steady state, guarded by the row a committed unit left (a :class:`Watermark`).

Invariants: a key's value never moves backwards through ``advance``; locks are taken in
(asset id, key) order, so two units advancing overlapping keys cannot deadlock; a
watermark is remembered only after its transaction committed.

Failure windows: a remembered watermark goes stale when another writer (another
process, or a ``set``) changes its row; its guard then matches nothing and the unit
takes the locked path, so staleness costs statements, never a wrong value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import LargeBinary, bindparam, cast, func, select, tuple_, update
from sqlalchemy import text as sql_text
from sqlalchemy.engine import Connection

from sharedstream.statestore.comparison import is_forward
from sharedstream.statestore.models import asset_state_store
from sharedstream.statestore.scopes import Writer
from sharedstream.statestore.sql import insert_if_absent
from sharedstream.statestore.staging import StagedAdvance
from sharedstream.statestore.staterows import StateRows
from sharedstream.statestore.values import decode_value

# A compare-and-swap attempt fails only when another writer committed in between, so the
# loop always makes global progress; the cap turns a bug into an error instead of a hang.
MAX_CAS_ATTEMPTS = 1000

# Watermarks remembered between units of work: past the bound the backend forgets them
# all and the next unit takes the locked path once, which costs it a count and a locked read.
MAX_WATERMARKS = 100_000


class Watermark(NamedTuple):
    """An ``asset_state_store`` row as a committed unit of work left it."""

    version: int
    text: str
    value: Any


class CompareSwap(StateRows):
    """The compare-and-swap half of :class:`~sharedstream.statestore.database.DatabaseBackend`."""

    _watermarks: dict[tuple[int, str], Watermark]

    def _advance_once(
        self, connection: Connection, asset_id: int, key: str, value: Any, text: str,
        writer: Writer, lock: bool,
    ) -> bool | None:
        """One compare-and-swap attempt: True moved, False not forwards, None lost a race.

        The comparison runs in Python (JSON ordering rules SQL cannot express), so the
        swap is guarded by the row's version: ``UPDATE ... WHERE version = :seen`` matches
        nothing if anyone wrote since the read. An absent key is claimed by an insert that
        does nothing on conflict. ``lock`` adds ``FOR UPDATE``: needed inside a long
        transaction on MySQL, whose repeatable-read snapshot would otherwise show the same
        stale version forever.
        """
        s = asset_state_store.c
        query = select(s.value, s.version).where(s.asset_id == asset_id, s.key == key)
        row = connection.execute(query.with_for_update() if lock else query).first()
        if row is None:
            inserted = insert_if_absent(
                connection, asset_state_store, self._asset_row(asset_id, key, text, writer)
            )
            return True if inserted else None
        if not is_forward(value, decode_value(row.value)):
            return False
        result = connection.execute(
            update(asset_state_store)
            .where(s.asset_id == asset_id, s.key == key, s.version == row.version)
            .values(value=text, version=row.version + 1, updated_at=self.clock(),
                    writer_kind=writer.kind, writer_id=writer.identity)
        )
        return True if result.rowcount == 1 else None

    def _advance_in(self, connection: Connection, asset_id: int, key: str, value: Any,
                    text: str, writer: Writer, lock: bool) -> bool:
        """:meth:`_advance_once` inside the caller's transaction until it moves the key or
        finds it not forwards. Every retry runs in the same transaction, so on MySQL it
        needs ``lock`` to see the winner's row; past ``MAX_CAS_ATTEMPTS`` the error fails
        the caller's whole transaction, which it rolls back."""
        for _ in range(MAX_CAS_ATTEMPTS):
            outcome = self._advance_once(connection, asset_id, key, value, text, writer, lock)
            if outcome is not None:
                return outcome
        raise RuntimeError(f"advance of {key!r} lost {MAX_CAS_ATTEMPTS} races in a row")

    def _remember(self, marks: dict[tuple[int, str], Watermark]) -> None:
        """After a commit: the rows its advances left, for the next unit's guarded swap."""
        if len(self._watermarks) + len(marks) > MAX_WATERMARKS:
            self._watermarks.clear()
        self._watermarks.update(marks)

    def _apply_advances(self, connection: Connection,
                        advances: Sequence[tuple[int, str, StagedAdvance]]
                        ) -> dict[tuple[int, str], Watermark]:
        """Every staged advance of a unit: one guarded UPDATE when every key is remembered
        (:meth:`_swap_remembered`), else three statements instead of two per key. Returns
        the rows the advances leave, to remember once the transaction commits.

        One ``SELECT ... FOR UPDATE`` reads and locks all existing rows (in key order, so
        two units locking overlapping keys cannot deadlock); the comparisons run in Python;
        one executemany UPDATE, each row still guarded by the version it was read at, swaps
        the ones that move forwards. Under the row locks nobody can write in between, so
        every guarded update matches; where the dialect takes no row locks (SQLite) or
        cannot report an executemany's row count, a write in between is caught and those
        keys are redone one at a time by the per-key compare-and-swap, which is idempotent
        (a key already swapped compares equal and stays).

        Absent keys need the per-key path (a key is absent once in its life, and MySQL's
        insert count cannot tell a concurrent insert from ours). Locking the existing keys
        first and then inserting an absent *lower* key would take locks out of key order
        and deadlock against a unit that locks them in order; so when any key is absent
        (checked without locks), the whole unit takes the per-key path in key order.
        """
        if not advances:
            return {}
        wanted = {(asset_id, key): op for asset_id, key, op in advances}
        swapped_remembered = self._swap_remembered(connection, wanted)
        if swapped_remembered is not None:
            return swapped_remembered
        s = asset_state_store.c
        present = connection.execute(
            select(func.count()).select_from(asset_state_store)
            .where(tuple_(s.asset_id, s.key).in_(list(wanted)))).scalar_one()
        if present < len(wanted):
            for (asset_id, key), op in sorted(wanted.items()):
                self._advance_in(connection, asset_id, key, op.value, op.text, op.writer,
                                 lock=True)
            return {}  # versions unknown here: the next unit takes this path once more
        existing = connection.execute(
            select(s.asset_id, s.key, s.value, s.version)
            .where(tuple_(s.asset_id, s.key).in_(sorted(wanted)))
            .order_by(s.asset_id, s.key)
            .with_for_update()
        ).all()
        now = self.clock()
        forwards: list[tuple[tuple[int, str], StagedAdvance]] = []
        swaps: list[dict[str, Any]] = []
        marks: dict[tuple[int, str], Watermark] = {}
        for row in existing:
            ident = (row.asset_id, row.key)
            op = wanted.pop(ident)
            current = decode_value(row.value)
            if is_forward(op.value, current):
                forwards.append((ident, op))
                swaps.append(self._swap_params(ident, row.version, op, now))
                marks[ident] = Watermark(row.version + 1, op.text, op.value)
            else:
                marks[ident] = Watermark(row.version, row.value, current)
        redo = list(wanted.items())  # absent when read
        if swaps and self._swap(connection, swaps, by_value=False) != len(swaps):
            redo += forwards
        for ident, _ in redo:
            marks.pop(ident, None)
        for (asset_id, key), op in sorted(redo, key=lambda item: item[0]):
            self._advance_in(connection, asset_id, key, op.value, op.text, op.writer, lock=True)
        return marks

    def _swap_remembered(self, connection: Connection,
                         wanted: dict[tuple[int, str], StagedAdvance]
                         ) -> dict[tuple[int, str], Watermark] | None:
        """The steady state of a watermark in one statement: when every key of the unit
        is remembered from an earlier commit and every advance moves forwards of the
        remembered value, one executemany UPDATE swaps them, each guarded by the
        remembered version AND value (a key deleted and written again starts at version 1
        again; on MySQL/MariaDB the value compares as bytes, not by the column's
        case-insensitive collation). If another writer changed any row since, its guard
        matches nothing and this returns None: the caller's locked path then runs for the
        whole unit, where the keys swapped here compare equal to themselves and stay.

        The UPDATE locks rows in key order, as the locked path does. A backward or equal
        advance against the remembered value also goes to the locked path, since a
        ``set`` elsewhere may have moved the key back since. ``wanted`` is not changed.
        """
        marks: dict[tuple[int, str], Watermark] = {}
        swaps: list[dict[str, Any]] = []
        now = self.clock()
        for ident, op in sorted(wanted.items()):
            mark = self._watermarks.get(ident)
            if mark is None or not is_forward(op.value, mark.value):
                return None
            params = self._swap_params(ident, mark.version, op, now)
            params["b_seen_value"] = mark.text
            swaps.append(params)
            marks[ident] = Watermark(mark.version + 1, op.text, op.value)
        return marks if self._swap(connection, swaps, by_value=True) == len(swaps) else None

    @staticmethod
    def _swap_params(ident: tuple[int, str], seen: int, op: StagedAdvance,
                     now: datetime) -> dict[str, Any]:
        return {"b_asset_id": ident[0], "b_key": ident[1], "b_seen": seen,
                "b_value": op.text, "b_version": seen + 1, "b_updated_at": now,
                "b_writer_kind": op.writer.kind, "b_writer_id": op.writer.identity}

    @staticmethod
    def _swap(connection: Connection, swaps: list[dict[str, Any]], *,
              by_value: bool) -> int | None:
        """Swap each advanced key of ``swaps`` (:meth:`_swap_params`) if its row is still at
        the version it was seen at (and, ``by_value``, at the value too); how many rows
        were swapped, or None where the driver cannot count an executemany's rows.

        PostgreSQL: ONE statement, ``UPDATE ... FROM json_to_recordset(:rows)``, as the
        events are sent (an executemany is a statement per key). Its join visits the rows
        in the array's order, which is key order; the locked path's ``FOR UPDATE`` orders
        explicitly. MySQL/MariaDB compare the value as bytes (their text collation is
        case-insensitive); the others compare text exactly."""
        s = asset_state_store.c
        if connection.dialect.name == "postgresql":
            target = connection.dialect.identifier_preparer.format_table(asset_state_store)
            rows = [dict(row, b_updated_at=row["b_updated_at"].isoformat()) for row in swaps]
            stmt = sql_text(
                f"UPDATE {target} AS s SET value = r.b_value, version = r.b_version, "
                "updated_at = r.b_updated_at, writer_kind = r.b_writer_kind, "
                "writer_id = r.b_writer_id "
                "FROM json_to_recordset(CAST(:rows AS json)) AS r(b_asset_id integer, "
                "b_key text, b_seen bigint, b_seen_value text, b_value text, "
                "b_version bigint, b_updated_at timestamptz, b_writer_kind text, "
                "b_writer_id text) "
                "WHERE s.asset_id = r.b_asset_id AND s.key = r.b_key "
                "AND s.version = r.b_seen"
                + (" AND s.value = r.b_seen_value" if by_value else "")
            ).execution_options(preserve_rowcount=True)
            return int(connection.execute(
                stmt, {"rows": json.dumps(rows, separators=(",", ":"))}).rowcount)
        guard = [s.asset_id == bindparam("b_asset_id"), s.key == bindparam("b_key"),
                 s.version == bindparam("b_seen")]
        if by_value:
            seen: Any = bindparam("b_seen_value")
            if connection.dialect.name in ("mysql", "mariadb"):
                guard.append(cast(s.value, LargeBinary) == cast(seen, LargeBinary))
            else:
                guard.append(s.value == seen)
        swapped = connection.execute(
            update(asset_state_store).where(*guard)
            .values(value=bindparam("b_value"), version=bindparam("b_version"),
                    updated_at=bindparam("b_updated_at"),
                    writer_kind=bindparam("b_writer_kind"),
                    writer_id=bindparam("b_writer_id")),
            swaps).rowcount
        return int(swapped) if connection.dialect.supports_sane_multi_rowcount else None
