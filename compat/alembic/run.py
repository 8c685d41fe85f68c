# The Alembic check of compat/alembic_test.go: Alembic migrations and
# SQLAlchemy (Core and ORM, over psycopg2) through a coordinator and
# against plain PostgreSQL (PLAIN=1: no Citus calls); the two must print
# the same.
import os
import sys

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.orm import Session, declarative_base

url = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
cfg = Config()
cfg.set_main_option("script_location", here)
cfg.set_main_option("sqlalchemy.url", url)
engine = sa.create_engine(url)


def p(k, v):
    print(f"{k}: {v}", flush=True)


def version():
    with engine.connect() as c:
        return c.execute(sa.text("SELECT string_agg(version_num, ',') FROM alembic_version")).scalar()


def tables():
    with engine.connect() as c:
        return c.execute(sa.text("SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables "
                                 "WHERE table_schema = 'public' AND table_name LIKE 'al\\_%'")).scalar()


def columns():
    with engine.connect() as c:
        return c.execute(sa.text("SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns "
                                 "WHERE table_schema = 'public' AND table_name = 'al_accounts'")).scalar()


with engine.begin() as c:
    c.execute(sa.text("DROP TABLE IF EXISTS al_members, al_accounts, al_plans, alembic_version"))

command.upgrade(cfg, "001")
p("after 001", (version(), tables()))
with engine.begin() as c:
    c.execute(sa.text("INSERT INTO al_accounts (id, name, balance) SELECT g, 'n' || g, g * 10 FROM generate_series(1, 60) g"))
command.upgrade(cfg, "002")
p("after 002", (version(), columns()))

Base = declarative_base()


class Account(Base):
    __tablename__ = "al_accounts"
    id = sa.Column(sa.BigInteger, primary_key=True)
    name = sa.Column(sa.Text, nullable=False)
    balance = sa.Column(sa.Numeric(12, 2), nullable=False)
    plan_id = sa.Column(sa.Integer)


class Plan(Base):
    __tablename__ = "al_plans"
    id = sa.Column(sa.Integer, primary_key=True)
    title = sa.Column(sa.Text, nullable=False)


with Session(engine) as s:
    s.add_all([Account(id=100 + i, name=f"orm{i}", balance=i, plan_id=1) for i in range(5)])
    s.commit()
    a = s.get(Account, 42)
    p("orm get", (a.id, a.name, str(a.balance), a.plan_id))
    a.balance = a.balance + 5
    s.commit()
    q = s.query(Plan.title, sa.func.count(Account.id), sa.func.sum(Account.balance)).join(Account, Account.plan_id == Plan.id) \
        .group_by(Plan.title).order_by(Plan.title)
    p("orm join", [(t, n, str(b)) for t, n, b in q])
    s.commit()
    try:
        with s.begin():
            s.get(Account, 7).balance = -1
    except sa.exc.IntegrityError as e:
        p("orm check", e.orig.pgcode)
    with s.begin():
        s.get(Account, 8).balance += 1
        s.get(Account, 9).balance -= 1
    p("orm transfer", [str(s.get(Account, i).balance) for i in (7, 8, 9)])
    s.commit()
    p("orm filter", [x.id for x in s.query(Account).filter(Account.id.in_([3, 33, 103, 999])).order_by(Account.id)])
    # The foreign keys: a plan that does not exist, members of accounts
    # that do and do not, and members going with their account.
    s.commit()
    try:
        with s.begin():
            s.add(Account(id=200, name="bad plan", balance=1, plan_id=9))
    except sa.exc.IntegrityError as e:
        p("orm plan key", e.orig.pgcode)
    with s.begin():
        s.execute(sa.text("INSERT INTO al_members SELECT id, 1, name FROM al_accounts WHERE id <= 20"))
    try:
        with s.begin():
            s.execute(sa.text("INSERT INTO al_members VALUES (999, 1, 'nobody')"))
    except sa.exc.IntegrityError as e:
        p("member key", e.orig.pgcode)
    with s.begin():
        s.execute(sa.text("DELETE FROM al_accounts WHERE id IN (3, 4, 5)"))
    p("members", s.execute(sa.text("SELECT count(*), sum(account_id) FROM al_members")).one())
    s.commit()
    try:
        with s.begin():
            s.execute(sa.text("DELETE FROM al_plans WHERE id = 1"))
    except sa.exc.IntegrityError as e:
        p("plan in use", e.orig.pgcode)

try:
    command.upgrade(cfg, "003")
    p("003", "no error")
except sa.exc.IntegrityError as e:
    p("003", e.orig.pgcode)
p("after failed 003", (version(), columns()))
command.downgrade(cfg, "001")
p("after downgrade 001", (version(), columns()))
with engine.connect() as c:
    p("rows", c.execute(sa.text("SELECT count(*), sum(balance) FROM al_accounts")).one())
command.downgrade(cfg, "base")
p("after downgrade base", (version(), tables()))
command.upgrade(cfg, "002")
p("up again", (version(), tables(), columns()))
with engine.connect() as c:
    p("rows again", c.execute(sa.text("SELECT count(*) FROM al_accounts")).one())
command.downgrade(cfg, "base")
p("down again", (version(), tables()))
