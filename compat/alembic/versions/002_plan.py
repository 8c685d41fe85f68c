"""A plan per account, an index and a constraint."""
import sqlalchemy as sa
from alembic import op

revision = "002"
down_revision = "001"


def upgrade():
    op.add_column("al_accounts", sa.Column("plan_id", sa.Integer, nullable=True))
    op.create_index("al_accounts_plan", "al_accounts", ["plan_id"])
    op.create_check_constraint("al_balance_nonneg", "al_accounts", "balance >= 0")
    op.execute("UPDATE al_accounts SET plan_id = CASE WHEN id % 2 = 0 THEN 2 ELSE 1 END")
    op.create_foreign_key("al_accounts_plan_fk", "al_accounts", "al_plans", ["plan_id"], ["id"])


def downgrade():
    op.drop_constraint("al_accounts_plan_fk", "al_accounts", type_="foreignkey")
    op.drop_constraint("al_balance_nonneg", "al_accounts", type_="check")
    op.drop_index("al_accounts_plan", "al_accounts")
    op.drop_column("al_accounts", "plan_id")
