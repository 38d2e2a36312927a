"""Events: payloads as ``jsonb`` on PostgreSQL (issue 43).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06

PostgreSQL: ``asset_event.payload`` becomes ``jsonb``, so users can query payloads with
its operators (``payload->>'status'``, ``@>``) and index them. The existing JSON text is
converted in place: PostgreSQL rewrites the table and its indexes, in this migration's
transaction, holding an exclusive lock on ``asset_event`` meanwhile (measured: 1,000,000
events in about 20 s on a 2-core machine). ``jsonb`` cannot hold a NUL character: a
stored ``\\u0000`` escape (writers refuse new ones) becomes U+FFFD. SQLite and MariaDB
keep JSON text (MariaDB's JSON type is an alias of LONGTEXT with a check; nothing to
gain).

Downgrade turns the payloads back into text (``jsonb``'s spacing and key order, the same
JSON values).
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# A ``\u0000`` escape (not a literal backslash before "u0000": those come in pairs).
NUL_ESCAPE = r"(?<!\\)((?:\\\\)*)\\u0000"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE asset_event ALTER COLUMN payload TYPE jsonb USING "
            f"CAST(regexp_replace(payload, '{NUL_ESCAPE}', '\\1\\\\ufffd', 'g') AS jsonb)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE asset_event ALTER COLUMN payload TYPE text "
                   "USING CAST(payload AS text)")
