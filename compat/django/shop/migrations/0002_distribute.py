import os

from django.db import migrations

# The Citus-style layout, on pgfleet only (PLAIN=1: the oracle, plain
# PostgreSQL): countries a reference table, customers distributed by id,
# orders by customer with a primary key that includes it.
DISTRIBUTE = [
    "SELECT create_reference_table('shop_country')",
    "SELECT create_distributed_table('shop_customer', 'id')",
    "ALTER TABLE shop_order DROP CONSTRAINT shop_order_pkey",
    "ALTER TABLE shop_order ADD PRIMARY KEY (customer_id, id)",
    "SELECT create_distributed_table('shop_order', 'customer_id', colocate_with => 'shop_customer')",
]


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]
    operations = [] if os.environ.get("PLAIN") else [migrations.RunSQL(s) for s in DISTRIBUTE]
