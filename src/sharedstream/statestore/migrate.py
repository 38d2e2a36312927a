"""Run the packaged Alembic migrations programmatically (no alembic.ini at runtime)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


def is_known_revision(revision: str) -> bool:
    """Whether this version ships ``revision`` (a database migrated by a newer one is not)."""
    return revision in known_revisions()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


class SchemaRevisionError(ValueError):
    """A schema revision this version does not ship (a typo, or from a newer version)."""


def known_revisions() -> list[str]:
    return sorted(script.revision for script in
                  ScriptDirectory.from_config(_config()).walk_revisions())


def check_revision(revision: str) -> None:
    """Refuse a revision this version does not ship, before touching any database."""
    if revision != "head" and revision not in known_revisions():
        raise SchemaRevisionError(
            f"unknown schema revision {revision!r}: this version ships "
            f"{', '.join(known_revisions())} (or 'head')")


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to ``revision`` in one transaction (all-or-nothing where DDL is transactional;
    on MySQL/MariaDB DDL commits implicitly, so a failure can leave a partial revision)."""
    check_revision(revision)
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
