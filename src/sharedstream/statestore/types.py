"""Column types that behave the same on SQLite, PostgreSQL and MySQL/MariaDB.

Their MySQL types are picked when a MySQL engine first uses them: the MySQL dialect is
imported then, not by every process at start-up.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect, Text, cast
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator, TypeEngine, UserDefinedType

# Where the rest of the package has always imported it from; defined with the other
# operator times, in a module that loads no SQLAlchemy.
from sharedstream.statestore.durations import utcnow as utcnow


def _is_mysql(dialect: Dialect) -> bool:
    return dialect.name in ("mysql", "mariadb")


class JsonText(TypeDecorator[str]):
    """JSON values, stored as text we encode ourselves (stable across dialects): TEXT, and
    MEDIUMTEXT on MySQL, whose TEXT stops at 64 KiB, below a value at the limit plus
    multi-byte characters."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        # The types themselves, not their dialect's adaptations: DDL renders these (and
        # PostgreSQL's psycopg adapts Text to a String that renders as VARCHAR).
        if _is_mysql(dialect):
            from sqlalchemy.dialects import mysql

            return mysql.MEDIUMTEXT()
        return self.impl_instance


class JsonPayload(JsonText):
    """An event payload: ``jsonb`` on PostgreSQL, so that users can query it with its JSON
    operators and indexes; JSON text elsewhere, as :class:`JsonText`.

    Python sees JSON text on every dialect, the text we encode (``eventrows``): on
    PostgreSQL the value is cast to ``jsonb`` where it is bound and back to text where it
    is selected (``jsonb`` renders its own spacing and key order; the decoded value is the
    same). The writers that build their own SQL (``json_populate_recordset``, ``COPY``)
    hand PostgreSQL the same text.
    """

    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return _JsonbText()
        return super().load_dialect_impl(dialect)


class _JsonbText(UserDefinedType[str]):
    """PostgreSQL ``jsonb`` read and written as text (no driver adaptation: psycopg would
    otherwise hand back decoded objects, and a JSON string would be indistinguishable from
    JSON text)."""

    cache_ok = True

    def get_col_spec(self, **_: Any) -> str:
        return "JSONB"

    def bind_expression(self, bindvalue: Any) -> ColumnElement[str]:
        return cast(bindvalue, self)

    def column_expression(self, colexpr: Any) -> ColumnElement[str]:
        return cast(colexpr, Text)


class UtcDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every dialect.

    PostgreSQL stores ``timestamptz``; SQLite and MySQL have no zone, so values are stored as
    naive UTC (MySQL with microseconds) and tagged UTC again on the way out. Naive input is
    refused: guessing its zone would shift expiry silently.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if _is_mysql(dialect):
            from sqlalchemy.dialects import mysql

            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given where a UTC instant is needed")
        value = value.astimezone(UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

