"""Tracing: the trace context an asset event was made in, which its delivery continues.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: adding it rewrites no row on PostgreSQL, MariaDB (an
    # instant ADD COLUMN) or SQLite, and a row written with tracing off stays NULL.
    with op.batch_alter_table("asset_event") as batch:
        batch.add_column(sa.Column("trace_context", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("asset_event") as batch:
        batch.drop_column("trace_context")
