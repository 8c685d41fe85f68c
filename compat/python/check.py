# The Python check of compat/python_test.go: psycopg2 and psycopg 3 as
# applications use them, printing what they see. Run through a coordinator
# and against plain PostgreSQL (PLAIN=1: no Citus calls), the two must
# print the same.
import datetime
import decimal
import io
import os
import sys
import threading
import time
import uuid

import psycopg
import psycopg2
import psycopg2.errors
import psycopg2.extras

PLAIN = os.environ.get("PLAIN") is not None
DSN = sys.argv[1]


def p(k, v):
    print(f"{k}: {v}", flush=True)


def err(e):
    d = getattr(e, "diag", None)
    if d is None:
        return type(e).__name__
    return f"{d.sqlstate} table={d.table_name} constraint={d.constraint_name}"


psycopg2.extras.register_uuid()

# psycopg2: the simple protocol with its own literals, a transaction opened
# before every first statement.
c = psycopg2.connect(DSN)
cur = c.cursor()
cur.execute("DROP TABLE IF EXISTS pyaccounts, pyitems, pyref")
cur.execute("""CREATE TABLE pyaccounts (aid bigint PRIMARY KEY, bid int NOT NULL,
    balance numeric(12,2) NOT NULL CHECK (balance >= 0), note text, created timestamptz,
    tags text[], doc jsonb, id uuid, raw bytea)""")
cur.execute("CREATE TABLE pyitems (aid bigint NOT NULL, n int NOT NULL, v text, PRIMARY KEY (aid, n))")
cur.execute("CREATE TABLE pyref (bid int PRIMARY KEY, name text)")
c.commit()
if not PLAIN:
    c.autocommit = True
    cur.execute("SELECT create_distributed_table(%s, %s)", ("pyaccounts", "aid"))
    cur.execute("SELECT create_distributed_table(%s, %s, colocate_with => %s)", ("pyitems", "aid", "pyaccounts"))
    cur.execute("SELECT create_reference_table(%s)", ("pyref",))
    c.autocommit = False
cur.execute("INSERT INTO pyref VALUES (1, 'north'), (2, 'south'), (3, 'east')")
t0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
rows = [(i, i % 3 + 1, decimal.Decimal(i * 10) + decimal.Decimal("0.25"), None if i % 7 == 0 else f"note {i}",
         t0 + datetime.timedelta(hours=i), [f"t{i % 4}", "x"], psycopg2.extras.Json({"i": i, "odd": i % 2 == 1}),
         uuid.UUID(int=i), bytes([i % 256, 0, 255])) for i in range(1, 301)]
psycopg2.extras.execute_values(cur, "INSERT INTO pyaccounts VALUES %s", rows, page_size=100)
p("execute_values", cur.rowcount)
cur.executemany("INSERT INTO pyitems VALUES (%s, %s, %s)", [(i % 50 + 1, i, f"v{i}") for i in range(1, 121)])
c.commit()

cur.execute("SELECT aid, bid, balance, note, created, tags, doc, id, raw FROM pyaccounts WHERE aid = %s", (42,))
r = cur.fetchone()
p("point", (r[0], r[1], r[2], r[3], r[4].isoformat(), r[5], r[6], r[7], bytes(r[8])))
cur.execute("SELECT a.aid, r.name, count(i.n) FROM pyaccounts a JOIN pyref r ON r.bid = a.bid "
            "LEFT JOIN pyitems i ON i.aid = a.aid WHERE a.aid IN %s GROUP BY a.aid, r.name ORDER BY a.aid", ((3, 17, 44, 290),))
p("join", cur.fetchall())
cur.execute("SELECT bid, count(*), sum(balance), max(note) FROM pyaccounts GROUP BY bid ORDER BY bid")
p("group", cur.fetchall())
cur.execute("SELECT doc->>'i', tags[1] FROM pyaccounts WHERE doc @> %s ORDER BY aid LIMIT 3",
            (psycopg2.extras.Json({"odd": True}),))
p("jsonb", cur.fetchall())
c.commit()

# Server-side cursors: DECLARE and FETCH in a transaction, and WITH HOLD.
nc = c.cursor(name="pycur")
nc.itersize = 17
nc.execute("SELECT aid, balance FROM pyaccounts WHERE bid = %s ORDER BY aid", (2,))
n = s = 0
for aid, bal in nc:
    n += 1
    s += aid
nc.close()
c.commit()
p("named cursor", (n, s))
c.autocommit = True
hc = c.cursor(name="pyhold", withhold=True)
hc.itersize = 40
hc.execute("SELECT aid FROM pyaccounts ORDER BY aid DESC")
p("withhold", (len(hc.fetchmany(25)), len(hc.fetchall())))
hc.close()
c.autocommit = False

# COPY in and out; a COPY with a bad row leaves nothing.
buf = io.StringIO("".join(f"{i},1,5.00,copied\n" for i in range(1001, 1041)))
cur.copy_expert("COPY pyaccounts (aid, bid, balance, note) FROM STDIN WITH (FORMAT csv)", buf)
c.commit()
out = io.StringIO()
cur.copy_expert("COPY (SELECT aid, note FROM pyaccounts WHERE aid BETWEEN 1035 AND 1045 ORDER BY aid) TO STDOUT WITH (FORMAT csv)", out)
p("copy out", out.getvalue().replace("\n", "|"))
try:
    cur.copy_expert("COPY pyaccounts (aid, bid, balance) FROM STDIN", io.StringIO("2001\t1\t1\n2002\t1\t-1\n2003\t1\t1\n"))
    p("bad copy", "no error")
except psycopg2.Error as e:
    p("bad copy", err(e))
c.rollback()
cur.execute("SELECT count(*) FROM pyaccounts WHERE aid > 2000")
p("bad copy left", cur.fetchone())
c.commit()

# Errors and their fields; the transaction then refuses until rollback.
try:
    cur.execute("INSERT INTO pyaccounts (aid, bid, balance) VALUES (5, 1, 0)")
except psycopg2.Error as e:
    p("duplicate", err(e))
try:
    cur.execute("SELECT 1")
except psycopg2.Error as e:
    p("aborted", err(e))
c.rollback()
try:
    cur.execute("UPDATE pyaccounts SET balance = balance - 100000 WHERE aid = 6")
except psycopg2.Error as e:
    p("check", err(e))
c.rollback()

# A transfer over two shards in one transaction, and one rolled back.
cur.execute("UPDATE pyaccounts SET balance = balance - 7.5 WHERE aid = %s", (8,))
cur.execute("UPDATE pyaccounts SET balance = balance + 7.5 WHERE aid = %s", (9,))
c.commit()
cur.execute("UPDATE pyaccounts SET balance = 0 WHERE aid IN (10, 110)")
c.rollback()
cur.execute("SELECT aid, balance FROM pyaccounts WHERE aid IN (8, 9, 10, 110) ORDER BY aid")
p("transfer", cur.fetchall())
c.commit()

# Session settings as psycopg2 sets them.
c.set_session(isolation_level="REPEATABLE READ", readonly=True)
cur.execute("SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only'), count(*) FROM pyaccounts WHERE aid = 5")
p("set_session", cur.fetchone())
try:
    cur.execute("DELETE FROM pyaccounts WHERE aid = 1")
except psycopg2.Error as e:
    p("read only", err(e))
c.rollback()
c.set_session(isolation_level="READ COMMITTED", readonly=False)
cur.execute("SET TIME ZONE 'America/Los_Angeles'")
cur.execute("SELECT created::text, to_char(created, 'YYYY-MM-DD HH24:MI TZ') FROM pyaccounts WHERE aid = %s", (100,))
p("time zone", cur.fetchone())
c.commit()

# Two-phase commit (the DB-API tpc_ methods), and recovery.
xid = c.xid(4660, "py-check-1", "b1")
c.tpc_begin(xid)
cur.execute("UPDATE pyaccounts SET note = 'tpc' WHERE aid IN (20, 120)")
c.tpc_prepare()
c.tpc_commit()
c.tpc_begin(c.xid(4660, "py-check-2", "b1"))
cur.execute("UPDATE pyaccounts SET note = 'tpc2' WHERE aid = 21")
c.tpc_prepare()
c.reset()
found = [x for x in c.tpc_recover() if x.gtrid.startswith("py-check-")]
p("tpc recover", [x.gtrid for x in found])
for x in found:
    c.tpc_rollback(x)
c.autocommit = True
cur.execute("SELECT aid, note FROM pyaccounts WHERE aid IN (20, 21, 120) ORDER BY aid")
p("tpc rows", cur.fetchall())

# LISTEN/NOTIFY between two connections.
c2 = psycopg2.connect(DSN)
c2.autocommit = True
c2.cursor().execute("LISTEN pychan")
cur.execute("NOTIFY pychan, 'hello'")
cur.execute("SELECT pg_notify('pychan', 'again')")
deadline = time.time() + 5
got = []
while len(got) < 2 and time.time() < deadline:
    c2.poll()
    while c2.notifies:
        got.append(c2.notifies.pop(0).payload)
    time.sleep(0.05)
p("notify", got)
c2.close()

# Cancel from another thread.
def cancel_soon():
    time.sleep(0.5)
    c.cancel()
threading.Thread(target=cancel_soon).start()
try:
    cur.execute("SELECT pg_sleep(20)")
    p("cancel", "no error")
except psycopg2.Error as e:
    p("cancel", err(e))
cur.execute("SELECT count(*) FROM pyaccounts")
p("after cancel", cur.fetchone())
c.close()

# psycopg 3: the extended protocol, parameters bound on the server,
# statements prepared after prepare_threshold, pipelines, COPY by rows.
with psycopg.connect(DSN, prepare_threshold=2) as a:
    rs = []
    for k in (1, 50, 99, 150, 199, 250):
        rs.append(a.execute("SELECT aid, balance, note, created FROM pyaccounts WHERE aid = %s", (k,)).fetchone())
    p("pg3 point", [(r[0], r[1], r[2], r[3].isoformat()) for r in rs])
    rs = []
    for k in (3, 60, 130):
        rs.append(a.cursor(binary=True).execute("SELECT aid, balance, tags, id FROM pyaccounts WHERE aid = %s", (k,)).fetchone())
    p("pg3 binary", rs)
    p("pg3 any", a.execute("SELECT aid FROM pyaccounts WHERE aid = ANY(%s) ORDER BY aid", ([7, 70, 700, 77],)).fetchall())
    with a.transaction():
        a.cursor().executemany("INSERT INTO pyitems VALUES (%s, %s, %s)", [(k, 1000 + k, "many") for k in range(1, 41)])
        with a.transaction():
            a.execute("UPDATE pyaccounts SET balance = balance + 1 WHERE aid = 30")
        try:
            with a.transaction():
                a.execute("UPDATE pyaccounts SET balance = balance + 1 WHERE aid = 31")
                a.execute("INSERT INTO pyitems VALUES (1, 1001, 'dup')")
        except psycopg.Error as e:
            p("pg3 savepoint", e.sqlstate)
    p("pg3 after", a.execute("SELECT (SELECT count(*) FROM pyitems WHERE n > 1000), "
                            "(SELECT balance FROM pyaccounts WHERE aid = 30), (SELECT balance FROM pyaccounts WHERE aid = 31)").fetchone())
    with a.pipeline():
        c1 = a.execute("SELECT count(*) FROM pyaccounts WHERE bid = %s", (1,))
        a.execute("UPDATE pyaccounts SET note = %s WHERE aid = %s", ("piped", 40))
        c3 = a.execute("SELECT note FROM pyaccounts WHERE aid = %s", (40,))
    p("pg3 pipeline", (c1.fetchone(), c3.fetchone()))
    a.commit()
    with a.cursor() as cc:
        with cc.copy("COPY pyitems (aid, n, v) FROM STDIN") as cp:
            for k in range(1, 31):
                cp.write_row((k * 3, 5000 + k, None if k % 5 == 0 else f"c{k}"))
    a.commit()
    with a.cursor() as cc:
        with cc.copy("COPY (SELECT aid, n, v FROM pyitems WHERE n > 5025 ORDER BY n) TO STDOUT") as cp:
            p("pg3 copy out", list(cp.rows()))
    with a.cursor(name="pg3cur") as sc:
        sc.itersize = 9
        sc.execute("SELECT aid FROM pyitems WHERE n > %s ORDER BY aid, n", (1000,))
        p("pg3 named cursor", len(sc.fetchall()))
    a.commit()
    p("pg3 total", a.execute("SELECT count(*), sum(balance), count(note) FROM pyaccounts").fetchone())
    p("pg3 items", a.execute("SELECT count(*), count(v), sum(n) FROM pyitems").fetchone())
