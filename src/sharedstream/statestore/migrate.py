"""Run the packaged Alembic migrations programmatically (no alembic.ini at runtime).

Alembic (with Mako and Pygments, a tenth of ``sharedstream run``'s import time) loads
only to migrate: the revisions this version ships are :data:`REVISIONS`, and a
database's revision is read from ``alembic_version`` with SQLAlchemy alone, so the
schema check of ``run``, ``check`` and ``deliver`` never imports it.
tests/unit/test_cli_startup.py fails when :data:`REVISIONS` differs from the
migrations folder, so a new migration cannot be shipped without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

# Every revision in migrations/versions, oldest first: the last is the head.
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008")

# Alembic's default version table, which migrations/env.py keeps.
_VERSION_TABLE = sa.table("alembic_version", sa.column("version_num", sa.String))


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    return REVISIONS[-1]


def is_known_revision(revision: str) -> bool:
    """Whether this version ships ``revision`` (a database migrated by a newer one is not)."""
    return revision in REVISIONS


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision, None when it has none (no ``alembic_version``
    table, or an empty one), read as Alembic reads it."""
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table(_VERSION_TABLE.name):
            return None
        found = connection.execute(sa.select(_VERSION_TABLE.c.version_num)).scalars().all()
    if len(found) > 1:
        raise SchemaRevisionError(f"the database records several schema revisions "
                                  f"({', '.join(sorted(found))}): this version ships one "
                                  "line of migrations and cannot tell which applies")
    return found[0] if found else None


class SchemaRevisionError(ValueError):
    """A schema revision this version does not ship (a typo, or from a newer version)."""


def known_revisions() -> list[str]:
    return sorted(REVISIONS)


def check_revision(revision: str) -> None:
    """Refuse a revision this version does not ship, before touching any database."""
    if revision != "head" and revision not in REVISIONS:
        raise SchemaRevisionError(
            f"unknown schema revision {revision!r}: this version ships "
            f"{', '.join(known_revisions())} (or 'head')")


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to ``revision`` in one transaction (all-or-nothing where DDL is transactional;
    on MySQL/MariaDB DDL commits implicitly, so a failure can leave a partial revision)."""
    from alembic import command

    check_revision(revision)
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

