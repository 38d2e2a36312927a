"""A throwaway PostgreSQL schema per test, in the session's database."""

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
