# Alembic's environment for compat/alembic: online migrations over the URL
# run.py gives, in one transaction (Alembic's default for PostgreSQL).
from alembic import context
from sqlalchemy import create_engine

url = context.config.get_main_option("sqlalchemy.url")
engine = create_engine(url)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
