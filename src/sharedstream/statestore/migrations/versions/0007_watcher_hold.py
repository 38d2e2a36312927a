"""Holds that survive a crash: ``watcher_hold`` (issue 41).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05

One row per message a watcher failed or rejected and may have moved past, written in
the same transaction as the watcher's later events (``sharedstream.core.holds``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "watcher_hold",
        sa.Column("topic", sa.String(250), nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("offset", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("watcher", sa.String(250), nullable=False),
        sa.Column("consumer_group", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", "offset", "watcher",
                                name="pk_watcher_hold"),
    )


def downgrade() -> None:
    op.drop_table("watcher_hold")
