"""Dialect-correct single statements: upserts and insert-if-absent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.expression import ColumnElement

MYSQL_DUPLICATE_KEY = 1062


def _is_mysql(connection: Connection) -> bool:
    return connection.dialect.name in ("mysql", "mariadb")


def upsert(
    connection: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    conflict: Sequence[str],
    update: Sequence[str],
    extra: Mapping[str, ColumnElement[Any]] | None = None,
) -> None:
    """Insert ``rows``, or update columns ``update`` (plus ``extra`` expressions over the
    existing row) where the unique key ``conflict`` already exists: one statement,
    executed as a multi-row batch, never a read-then-write."""
    if not rows:
        return
    extra = dict(extra or {})
    if _is_mysql(connection):
        my_stmt = mysql.insert(table)
        my_set: dict[str, Any] = {c: my_stmt.inserted[c] for c in update}
        my_set.update(extra)
        connection.execute(my_stmt.on_duplicate_key_update(my_set), list(rows))
        return
    stmt = (postgresql.insert(table) if connection.dialect.name == "postgresql"
            else sqlite.insert(table))
    set_: dict[str, Any] = {c: stmt.excluded[c] for c in update}
    set_.update(extra)
    connection.execute(
        stmt.on_conflict_do_update(index_elements=list(conflict), set_=set_), list(rows)
    )


def insert_if_absent(connection: Connection, table: Table, row: Mapping[str, Any]) -> bool:
    """Insert ``row`` unless its unique key exists; True if this call inserted it.

    MySQL has no ON CONFLICT DO NOTHING (INSERT IGNORE would also swallow foreign-key and
    other errors), so there a duplicate-key error is caught; InnoDB rolls back only the
    statement, the surrounding transaction stays usable.
    """
    if _is_mysql(connection):
        try:
            connection.execute(table.insert().values(dict(row)))
        except IntegrityError as exc:
            if getattr(exc.orig, "args", (None,))[0] == MYSQL_DUPLICATE_KEY:
                return False
            raise
        return True
    stmt = (postgresql.insert(table) if connection.dialect.name == "postgresql"
            else sqlite.insert(table))
    # RETURNING rather than rowcount: drivers may report -1 for INSERT ... ON CONFLICT.
    first_pk = next(iter(table.primary_key.columns))
    result = connection.execute(
        stmt.values(dict(row)).on_conflict_do_nothing().returning(first_pk)
    )
    return result.first() is not None


def insert_ignore_many(
    connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]
) -> int:
    """Insert ``rows`` as multi-row statements, skipping each row whose unique key
    exists; return how many were inserted.

    PostgreSQL and SQLite: ``ON CONFLICT DO NOTHING ... RETURNING``; the RETURNING makes
    SQLAlchemy send pages of multi-row VALUES instead of one statement per row, and its
    rows count what was really inserted. MySQL/MariaDB: ``ON DUPLICATE KEY UPDATE`` of the
    primary key to itself, a no-op on duplicates that, unlike INSERT IGNORE, still raises
    for foreign-key and other errors (the driver batches executemany into multi-row VALUES).
    """
    if not rows:
        return 0
    first_pk = next(iter(table.primary_key.columns))
    if _is_mysql(connection):
        my_stmt = mysql.insert(table)
        result = connection.execute(
            my_stmt.on_duplicate_key_update({first_pk.name: first_pk}), list(rows))
        return max(result.rowcount, 0)
    stmt = (postgresql.insert(table) if connection.dialect.name == "postgresql"
            else sqlite.insert(table))
    result = connection.execute(stmt.on_conflict_do_nothing().returning(first_pk), list(rows))
    return len(result.all())
