-- The differential corpus's schema (see queries.sql and corpus_test.go).
--
-- Every statement ends with ';' at the end of a line. The coordinator runs
-- every statement; the oracle (a plain PostgreSQL) runs every statement
-- except those after a line '-- fleet-only', which are the Citus calls that
-- distribute the tables.
--
-- customers, orders and line_items are distributed on customer_id and
-- colocated; events is distributed on event_id in a colocation group of
-- its own (other shard count), so joins of events with the others on
-- customer_id are non-colocated; regions and products are reference tables.

CREATE TABLE regions (
    region_id int PRIMARY KEY,
    name      text NOT NULL,
    country   text
);

CREATE TABLE products (
    product_id int PRIMARY KEY,
    name       text NOT NULL,
    category   text,
    list_price numeric(10,2)
);

CREATE TABLE customers (
    customer_id bigint PRIMARY KEY,
    name        text,
    region_id   int,
    signup      date,
    tier        text
);

CREATE TABLE orders (
    order_id    bigint NOT NULL,
    customer_id bigint NOT NULL,
    placed_at   timestamptz,
    status      text DEFAULT 'new',
    total       numeric(12,2),
    note        text,
    PRIMARY KEY (customer_id, order_id)
);

CREATE TABLE line_items (
    customer_id bigint NOT NULL,
    order_id    bigint NOT NULL,
    line_no     int NOT NULL,
    product_id  int,
    qty         int DEFAULT 1,
    price       numeric(10,2),
    PRIMARY KEY (customer_id, order_id, line_no)
);

CREATE TABLE events (
    event_id    bigint PRIMARY KEY,
    customer_id bigint,
    kind        text DEFAULT 'view',
    at          timestamp,
    payload     text,
    score       double precision
);

-- notes: distributed on a nullable column, with defaults that read the
-- transaction's time; starts empty (the corpus's writes fill it).
CREATE TABLE notes (
    note_id     bigint,
    customer_id bigint,
    body        text,
    created     timestamptz DEFAULT now(),
    day         date DEFAULT CURRENT_DATE
);

-- fleet-only
SELECT create_reference_table('regions');
-- fleet-only
SELECT create_reference_table('products');
-- fleet-only
SELECT create_distributed_table('customers', 'customer_id', shard_count => 4);
-- fleet-only
SELECT create_distributed_table('orders', 'customer_id', colocate_with => 'customers');
-- fleet-only
SELECT create_distributed_table('line_items', 'customer_id', colocate_with => 'customers');
-- fleet-only
SELECT create_distributed_table('events', 'event_id', colocate_with => 'none', shard_count => 3);
-- fleet-only
SELECT create_distributed_table('notes', 'customer_id', colocate_with => 'customers');
