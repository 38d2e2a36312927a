"""A throwaway PostgreSQL schema, or MariaDB database, per test, on the session's server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import make_url


def postgres_schema_url(base_url: str) -> Iterator[str]:
    schema = f"ss_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.connect() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


def mariadb_database_url(base_url: str) -> Iterator[str]:
    """A fresh database on the session's MariaDB server (a MySQL database is a schema)."""
    name = f"ss_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    try:
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as connection:
            connection.execute(sa.text(f"DROP DATABASE `{name}`"))
        engine.dispose()
