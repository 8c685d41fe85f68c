"""Django (the Debian package's) through a pgfleet coordinator, or plain
PostgreSQL with PLAIN=1: migrations, bulk inserts, the sequence reset
loaddata runs, ORM reads and updates; prints what a user would check.
compat/django_test.go runs it both ways and compares."""
import datetime
import decimal
import os
import sys
from urllib.parse import urlparse

import django
from django.conf import settings

url = urlparse(sys.argv[1])
settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": url.path.lstrip("/"),
                           "USER": url.username, "HOST": url.hostname, "PORT": url.port,
                           "OPTIONS": {"sslmode": "disable"}}},
    INSTALLED_APPS=["shop"], USE_TZ=True, TIME_ZONE="UTC", DEFAULT_AUTO_FIELD="django.db.models.AutoField")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.core.management.color import no_style  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.db.models import Count, OuterRef, Subquery, Sum  # noqa: E402
from django.db.models.functions import Coalesce, TruncMonth  # noqa: E402

from shop.models import Country, Customer, Note, Order, Tag  # noqa: E402

call_command("migrate", "shop", verbosity=0)
print("migrated:", [m for m in connection.introspection.table_names() if m.startswith("shop_")])

# Rows with their ids given, as loaddata writes them, then the sequence
# reset it runs after (SELECT setval(pg_get_serial_sequence(...), max(id)) FROM t).
with transaction.atomic():
    Country.objects.bulk_create([Country(id=i, name="c%d" % i) for i in (3, 5, 9)])
    Customer.objects.bulk_create([Customer(id=i, name="n%d" % i, country_id=(3, 5, 9)[i % 3]) for i in range(1, 31)])
    with connection.cursor() as cur:
        for sql in connection.ops.sequence_reset_sql(no_style(), [Country, Customer]):
            cur.execute(sql)
print("next country:", Country.objects.create(name="new").id)
print("next customer:", Customer.objects.create(name="new", country_id=3).id)

# Orders by bulk_create: ids drawn from the sequence, across shards.
base = datetime.datetime(2024, 3, 30, 22, 0, tzinfo=datetime.timezone.utc)
orders = Order.objects.bulk_create([
    Order(customer_id=c, total=decimal.Decimal("%d.50" % (c + n)), placed=base + datetime.timedelta(hours=7 * n + c))
    for c in range(1, 31) for n in range(c % 4)])
print("orders:", len(orders), sorted(o.id for o in orders) == list(range(1, len(orders) + 1)))

# A correlated subquery in update() (Subquery/OuterRef).
counts = Order.objects.filter(customer_id=OuterRef("id")).values("customer_id").annotate(c=Count("*")).values("c")[:1]
print("updated:", Customer.objects.filter(id__gt=10).update(visits=Coalesce(Subquery(counts), 0)))
print("visits:", list(Customer.objects.filter(id__lte=14).order_by("id").values_list("id", "visits")))

# TruncMonth in update() of one customer's orders (over several shards,
# AT TIME ZONE's timezone() has a STABLE overload reading today's date:
# refused there).
print("truncated:", Order.objects.filter(customer_id=7).update(placed=TruncMonth("placed")))
print("months:", sorted({o.placed.isoformat() for o in Order.objects.filter(customer_id__in=[6, 7])}))

# Reads over every shard and the reference table.
print("per country:", list(Customer.objects.values("country__name").annotate(n=Count("id"), v=Sum("visits")).order_by("country__name")))
print("top:", list(Customer.objects.annotate(n=Count("order")).order_by("-n", "id").values_list("id", "n")[:5]))

# A saved customer; one row updated by its key.
c = Customer.objects.get(id=7)
c.name = "seven"
c.save()
print("saved:", Customer.objects.get(id=7).name)

# A temporary table, dropped: the connection reads every shard again.
with connection.cursor() as cur:
    cur.execute("CREATE TEMP TABLE scratch (v int)")
    cur.execute("DROP TABLE scratch")
print("count after temp:", Customer.objects.count())

# The foreign key AddField made holds at once.
t = Tag.objects.create(label="x")
Note.objects.create(text="n", tag=t)
print("notes:", list(Note.objects.values_list("text", "tag__label")))
