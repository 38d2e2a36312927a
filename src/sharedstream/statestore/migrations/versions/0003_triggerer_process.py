"""Triggerer heartbeats: one row per running ``sharedstream run`` process.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JSON_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "triggerer_process",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("host", sa.String(250), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("watchers", JSON_TEXT, nullable=False),
        sa.Column("groups", JSON_TEXT, nullable=False),
        sa.Column("status_url", sa.Text(), nullable=True),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_triggerer_process"),
    )


def downgrade() -> None:
    op.drop_table("triggerer_process")
