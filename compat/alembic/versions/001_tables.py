"""Distributed and reference tables."""
import os

import sqlalchemy as sa
from alembic import op

revision = "001"
down_revision = None
PLAIN = os.environ.get("PLAIN") is not None


def upgrade():
    op.create_table("al_plans", sa.Column("id", sa.Integer, primary_key=True), sa.Column("title", sa.Text, nullable=False))
    op.create_table("al_accounts", sa.Column("id", sa.BigInteger, primary_key=True),
                    sa.Column("name", sa.Text, nullable=False), sa.Column("balance", sa.Numeric(12, 2), nullable=False))
    if not PLAIN:
        op.execute("SELECT create_reference_table('al_plans')")
        op.execute("SELECT create_distributed_table('al_accounts', 'id')")
    # Made with its key to a table distributed above in this migration's
    # transaction, then distributed colocated with it.
    op.create_table("al_members", sa.Column("account_id", sa.BigInteger, sa.ForeignKey("al_accounts.id", ondelete="CASCADE")),
                    sa.Column("id", sa.Integer), sa.Column("name", sa.Text), sa.PrimaryKeyConstraint("account_id", "id"))
    if not PLAIN:
        op.execute("SELECT create_distributed_table('al_members', 'account_id', colocate_with => 'al_accounts')")
    op.bulk_insert(sa.table("al_plans", sa.column("id", sa.Integer), sa.column("title", sa.Text)),
                   [{"id": 1, "title": "free"}, {"id": 2, "title": "pro"}])


def downgrade():
    op.drop_table("al_members")
    op.drop_table("al_accounts")
    op.drop_table("al_plans")
