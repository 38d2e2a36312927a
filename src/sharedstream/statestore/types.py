"""Column types that behave the same on SQLite, PostgreSQL and MySQL/MariaDB.

Their MySQL types are picked when a MySQL engine first uses them: the MySQL dialect is
imported then, not by every process at start-up.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect, Text
from sqlalchemy.types import TypeDecorator, TypeEngine


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


def utcnow() -> datetime:
    return datetime.now(UTC)
