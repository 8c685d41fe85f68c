"""A migration that fails midway: nothing of it may stay."""
import sqlalchemy as sa
from alembic import op

revision = "003"
down_revision = "002"


def upgrade():
    op.add_column("al_accounts", sa.Column("note", sa.Text))
    op.execute("UPDATE al_accounts SET balance = balance - 1000")  # the check constraint fails


def downgrade():
    op.drop_column("al_accounts", "note")
