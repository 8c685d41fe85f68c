-- pgfleet's differential corpus: statements that applications and BI tools
-- send, run by TestCorpus (corpus_test.go) through a coordinator in front of
-- two workers and on a plain PostgreSQL 15 holding the same data (schema.sql,
-- corpus_data_test.go). Each statement must give the oracle's answer
-- (SQLSTATE, command tag, column names and types, rows) or be refused with
-- SQLSTATE 0A000 and a hint.
--
-- Format: each statement follows a line '-- name: <unique name>'. A line
-- '-- ordered' compares rows in order (only where ORDER BY decides the order
-- completely, ties included); otherwise rows compare as a multiset.
-- Statements starting with INSERT, UPDATE, DELETE (or marked '-- write') are
-- writes. Reads also run a second time over the extended protocol (unnamed
-- statement, no parameters); writes run once, over the simple protocol.
-- Other comment lines are ignored.
--
-- Writes and state: the coordinator runs each statement first, and the
-- oracle runs it only when the coordinator did not refuse it (0A000). A
-- refused statement has changed nothing on the fleet (refusals come before
-- execution; statements run outside transaction blocks), so both databases
-- stay equal and later reads stay comparable. Writes after a refused write
-- must therefore not depend on it having happened; each write is followed
-- by a read that checks what it did.

------------------------------------------------------------------------
-- Point and range reads
------------------------------------------------------------------------

-- name: point-customer
SELECT * FROM customers WHERE customer_id = 42;

-- name: point-customer-big-id
SELECT customer_id, name, tier FROM customers WHERE customer_id = 9000000100;

-- name: point-customer-negative-id
SELECT * FROM customers WHERE customer_id = -7;

-- name: point-customer-missing
SELECT * FROM customers WHERE customer_id = 123456;

-- name: point-order-composite
SELECT order_id, placed_at, status, total, note FROM orders WHERE customer_id = 12 AND order_id = (SELECT min(order_id) FROM orders WHERE customer_id = 12);

-- name: orders-of-customer
-- ordered
SELECT order_id, status, total FROM orders WHERE customer_id = 17 ORDER BY order_id;

-- name: line-items-of-customer
-- ordered
SELECT order_id, line_no, product_id, qty, price FROM line_items WHERE customer_id = 25 ORDER BY order_id, line_no;

-- name: point-event
SELECT * FROM events WHERE event_id = 2500;

-- name: point-event-big
SELECT * FROM events WHERE event_id = 5000001500;

-- name: range-customer-ids
-- ordered
SELECT customer_id, name FROM customers WHERE customer_id BETWEEN 40 AND 60 ORDER BY customer_id;

-- name: range-events-ids
SELECT event_id, kind FROM events WHERE event_id >= 100 AND event_id < 130;

-- name: in-list-customers
SELECT customer_id, tier FROM customers WHERE customer_id IN (1, 2, 3, 50, 9000000050, -7);

-- name: in-list-events
SELECT event_id, customer_id, score FROM events WHERE event_id IN (1, 10, 100, 1000, 5000000500);

-- name: any-array-customers
SELECT customer_id, region_id FROM customers WHERE customer_id = ANY (ARRAY[5, 6, 7, 8]);

-- name: full-scan-regions
SELECT * FROM regions;

-- name: full-scan-products
SELECT * FROM products;

-- name: full-scan-customers
SELECT * FROM customers;

-- name: full-scan-orders
SELECT * FROM orders;

-- name: full-scan-events
SELECT * FROM events;

-- name: full-scan-line-items
SELECT * FROM line_items;

-- name: select-one
SELECT 1;

-- name: ref-counts
SELECT (SELECT count(*) FROM regions), (SELECT count(*) FROM products);

-- name: ref-counts-named
SELECT (SELECT count(*) FROM regions) AS regions, (SELECT count(*) FROM products) AS products;

------------------------------------------------------------------------
-- Filters: NULLs, IN, BETWEEN, LIKE/ILIKE, non-ASCII
------------------------------------------------------------------------

-- name: null-tier
SELECT customer_id FROM customers WHERE tier IS NULL;

-- name: not-null-signup-count
SELECT count(*) FROM customers WHERE signup IS NOT NULL;

-- name: null-region-or-dangling
SELECT customer_id, region_id FROM customers WHERE region_id IS NULL OR region_id NOT IN (SELECT region_id FROM regions);

-- name: is-distinct-from
SELECT count(*) FROM customers WHERE tier IS DISTINCT FROM 'gold';

-- name: not-in-with-null
SELECT count(*) FROM customers WHERE tier NOT IN ('gold', NULL);

-- name: coalesce-tier
SELECT coalesce(tier, '(none)') AS tier, count(*) FROM customers GROUP BY 1;

-- name: nullif-note
SELECT count(nullif(note, '')) AS notes, count(*) FILTER (WHERE note = '') AS empty, count(*) FILTER (WHERE note IS NULL) AS nulls FROM orders;

-- name: between-totals
SELECT count(*), sum(total) FROM orders WHERE total BETWEEN 10 AND 20;

-- name: not-between-negative
SELECT order_id, customer_id, total FROM orders WHERE total NOT BETWEEN 0 AND 1000000;

-- name: like-prefix
SELECT customer_id, name FROM customers WHERE name LIKE 'J%';

-- name: like-non-ascii
SELECT customer_id, name FROM customers WHERE name LIKE '%ü%';

-- name: ilike-non-ascii
SELECT customer_id, name FROM customers WHERE name ILIKE '%MÜLLER%';

-- name: ilike-cafe
SELECT order_id, note FROM orders WHERE note ILIKE '%café%';

-- name: like-cjk
SELECT customer_id, name FROM customers WHERE name LIKE '%日本%' OR name LIKE '山田%';

-- name: like-emoji
SELECT customer_id, name FROM customers WHERE name LIKE '%🚀%' OR name LIKE '%🙂';

-- name: like-escape-underscore
SELECT order_id, note FROM orders WHERE note LIKE '%\_%';

-- name: like-percent-literal
SELECT order_id, note FROM orders WHERE note LIKE '%50\%%';

-- name: not-like
SELECT count(*) FROM orders WHERE note NOT LIKE '%a%';

-- name: similar-to
SELECT count(*) FROM customers WHERE name SIMILAR TO '(Anna|anna|ANNA)%';

-- name: regex-match
SELECT customer_id, name FROM customers WHERE name ~ '^[A-Z][a-z]+ [A-Z]';

-- name: regex-imatch
SELECT count(*) FROM orders WHERE note ~* 'STRASSE|straße';

-- name: equals-non-ascii
SELECT order_id, customer_id FROM orders WHERE note = 'Größe L';

-- name: text-with-tab-newline
SELECT order_id, note FROM orders WHERE note LIKE E'%\t%' OR note LIKE E'%\n%' OR note LIKE '%\\%';

-- name: quote-in-text
SELECT count(*) FROM orders WHERE note = 'quote''d';

-- name: timestamp-range
SELECT count(*) FROM orders WHERE placed_at >= '2021-01-01 00:00:00+00' AND placed_at < '2022-01-01 00:00:00+00';

-- name: timestamp-range-offset
SELECT count(*) FROM orders WHERE placed_at < '2020-06-01 12:00:00+05:30';

-- name: date-range
SELECT customer_id, signup FROM customers WHERE signup BETWEEN '2020-02-01' AND '2020-03-31';

-- name: timestamp-no-tz-range
SELECT event_id, at FROM events WHERE at BETWEEN '2022-02-01' AND '2022-02-05 12:00';

-- name: float-filter
SELECT event_id, score FROM events WHERE score > 990;

-- name: float-eq-quarter
SELECT count(*) FROM events WHERE score = 0.25 OR score = -0.5;

-- name: numeric-negative-filter
SELECT customer_id, order_id, line_no, qty, price FROM line_items WHERE qty <= 0;

-- name: bool-expression-filter
SELECT count(*) FROM orders WHERE (status = 'paid') IS NOT TRUE;

-- name: in-subquery-literal-list-text
SELECT count(*) FROM orders WHERE status IN ('paid', 'Paid', 'shipped');

-- name: case-insensitive-status
SELECT lower(status) AS s, count(*) FROM orders GROUP BY lower(status);

------------------------------------------------------------------------
-- GROUP BY / HAVING and aggregates
------------------------------------------------------------------------

-- name: count-all
SELECT count(*) FROM orders;

-- name: count-star-and-column
SELECT count(*), count(placed_at), count(total), count(note) FROM orders;

-- name: count-distinct-customers-orders
SELECT count(DISTINCT customer_id) FROM orders;

-- name: count-distinct-status
SELECT count(DISTINCT status) FROM orders;

-- name: count-distinct-events-customer
SELECT count(DISTINCT customer_id) FROM events;

-- name: sum-avg-numeric
SELECT sum(total), avg(total), min(total), max(total) FROM orders;

-- name: sum-avg-float
SELECT sum(score), avg(score), min(score), max(score) FROM events;

-- name: sum-avg-int
SELECT sum(qty), avg(qty), min(qty), max(qty) FROM line_items;

-- name: sum-line-value
SELECT sum(qty * price) FROM line_items;

-- name: stddev-variance-numeric
SELECT stddev(total), variance(total), stddev_pop(total), var_samp(total) FROM orders;

-- name: stddev-variance-float-rounded
SELECT round(stddev(score)::numeric, 6), round(variance(score)::numeric, 4) FROM events;

-- name: stddev-int
SELECT stddev(qty), var_pop(qty) FROM line_items;

-- name: group-by-status
SELECT status, count(*), sum(total) FROM orders GROUP BY status;

-- name: group-by-status-ordered
-- ordered
SELECT status, count(*) AS n FROM orders GROUP BY status ORDER BY n DESC, status;

-- name: group-by-tier-null
SELECT tier, count(*) FROM customers GROUP BY tier;

-- name: group-by-alias
SELECT date_part('year', placed_at) AS yr, count(*) AS n FROM orders GROUP BY yr;

-- name: group-by-ordinal
SELECT kind, count(*) FROM events GROUP BY 1;

-- name: group-by-ordinal-ordered
-- ordered
SELECT kind, count(*), sum(score) FROM events GROUP BY 1 ORDER BY 1;

-- name: group-by-two-columns
SELECT kind, date_trunc('year', at) AS y, count(*) FROM events GROUP BY kind, y;

-- name: group-by-customer
SELECT customer_id, count(*), sum(total) FROM orders GROUP BY customer_id;

-- name: group-by-customer-having
SELECT customer_id, count(*) FROM orders GROUP BY customer_id HAVING count(*) >= 12;

-- name: having-sum
SELECT status, sum(total) FROM orders GROUP BY status HAVING sum(total) > 10000;

-- name: having-without-group-select
SELECT kind FROM events GROUP BY kind HAVING avg(score) > 240;

-- name: group-by-region
SELECT region_id, count(*) FROM customers GROUP BY region_id;

-- name: group-by-expression
SELECT (qty > 0) AS positive, count(*), sum(price) FROM line_items GROUP BY (qty > 0);

-- name: group-by-case
SELECT CASE WHEN total IS NULL THEN 'unknown' WHEN total < 0 THEN 'refund' WHEN total < 50 THEN 'small' ELSE 'large' END AS bucket, count(*)
FROM orders GROUP BY 1;

-- name: aggregate-filter
SELECT count(*) FILTER (WHERE status = 'paid') AS paid, count(*) FILTER (WHERE status = 'shipped') AS shipped, sum(total) FILTER (WHERE total < 0) AS refunds FROM orders;

-- name: string-agg-ordered
SELECT string_agg(name, ', ' ORDER BY region_id) FROM regions;

-- name: string-agg-per-customer
SELECT customer_id, string_agg(status, ',' ORDER BY order_id) FROM orders WHERE customer_id < 20 GROUP BY customer_id;

-- name: string-agg-distinct
SELECT string_agg(DISTINCT status, '|' ORDER BY status) FROM orders;

-- name: array-agg-ordered
SELECT customer_id, array_agg(order_id ORDER BY order_id) FROM orders WHERE customer_id BETWEEN 30 AND 40 GROUP BY customer_id;

-- name: array-agg-global
SELECT array_agg(DISTINCT kind ORDER BY kind) FROM events;

-- name: bool-and-or
SELECT customer_id, bool_and(qty > 0), bool_or(qty > 4) FROM line_items GROUP BY customer_id;

-- name: bool-and-global
SELECT bool_and(total IS NOT NULL), bool_or(total < 0), every(order_id > 0) FROM orders;

-- name: percentile-cont
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY score) FROM events;

-- name: percentile-cont-multi
SELECT percentile_cont(ARRAY[0.25, 0.5, 0.75]) WITHIN GROUP (ORDER BY score) FROM events;

-- name: percentile-disc-numeric
SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY total) FROM orders;

-- name: percentile-by-status
SELECT status, percentile_disc(0.5) WITHIN GROUP (ORDER BY total) FROM orders GROUP BY status;

-- name: mode-kind
SELECT mode() WITHIN GROUP (ORDER BY kind) FROM events;

-- name: mode-product
SELECT mode() WITHIN GROUP (ORDER BY product_id) FROM line_items;

-- name: min-max-text
SELECT min(name), max(name) FROM customers;

-- name: min-max-timestamp
SELECT min(placed_at), max(placed_at), min(at), max(at) FROM orders, (SELECT min(at) AS at FROM events) e;

-- name: min-max-timestamps-separate
SELECT min(at), max(at) FROM events;

-- name: min-max-date
SELECT min(signup), max(signup) FROM customers;

-- name: avg-by-kind-rounded
SELECT kind, round(avg(score)::numeric, 3) FROM events GROUP BY kind;

-- name: count-per-customer-distribution
SELECT n, count(*) FROM (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) s GROUP BY n;

-- name: grouping-sets
SELECT status, date_part('year', placed_at) AS y, count(*) FROM orders GROUP BY GROUPING SETS ((status), (y), ());

-- name: rollup
SELECT tier, region_id, count(*) FROM customers GROUP BY ROLLUP (tier, region_id);

-- name: cube
SELECT kind, score > 0 AS pos, count(*) FROM events GROUP BY CUBE (kind, score > 0);

-- name: json-agg-ref
SELECT json_agg(name ORDER BY region_id) FROM regions WHERE country IS NOT NULL;

-- name: sum-empty
SELECT sum(total), count(*), avg(total), max(total) FROM orders WHERE customer_id = 3;

-- name: sum-empty-multi-shard
SELECT sum(total), count(*), max(note) FROM orders WHERE total > 999999;

-- name: group-empty-multi-shard
SELECT status, count(*) FROM orders WHERE total > 999999 GROUP BY status;

------------------------------------------------------------------------
-- ORDER BY / LIMIT / OFFSET
------------------------------------------------------------------------

-- name: order-by-limit
-- ordered
SELECT customer_id, order_id, total FROM orders ORDER BY total DESC NULLS LAST, customer_id, order_id LIMIT 10;

-- name: order-by-limit-offset
-- ordered
SELECT customer_id, order_id, total FROM orders ORDER BY total, customer_id, order_id LIMIT 10 OFFSET 20;

-- name: order-by-nulls-first
-- ordered
SELECT customer_id, name FROM customers ORDER BY name NULLS FIRST, customer_id LIMIT 15;

-- name: order-by-text-non-ascii
-- ordered
SELECT name FROM regions ORDER BY name;

-- name: order-by-ties-broken
-- ordered
SELECT customer_id, tier FROM customers ORDER BY tier DESC NULLS FIRST, customer_id DESC LIMIT 25;

-- name: order-by-expression
-- ordered
SELECT event_id, score FROM events WHERE score IS NOT NULL ORDER BY abs(score) DESC, event_id LIMIT 12;

-- name: order-by-timestamp
-- ordered
SELECT event_id, at FROM events WHERE at IS NOT NULL ORDER BY at, event_id LIMIT 10;

-- name: order-by-timestamptz-desc
-- ordered
SELECT order_id, placed_at FROM orders WHERE placed_at IS NOT NULL ORDER BY placed_at DESC, order_id LIMIT 10;

-- name: order-by-ordinal
-- ordered
SELECT product_id, name, list_price FROM products ORDER BY 3 DESC NULLS LAST, 1;

-- name: order-by-alias
-- ordered
SELECT customer_id AS c, count(*) AS n FROM orders GROUP BY customer_id ORDER BY n DESC, c LIMIT 10;

-- name: limit-only-count
SELECT count(*) FROM (SELECT * FROM events LIMIT 50) s;

-- name: offset-beyond
-- ordered
SELECT event_id FROM events ORDER BY event_id OFFSET 5000;

-- name: limit-zero
SELECT * FROM orders LIMIT 0;

-- name: fetch-first
-- ordered
SELECT event_id, kind FROM events ORDER BY event_id DESC FETCH FIRST 5 ROWS ONLY;

-- name: fetch-with-ties
-- ordered
SELECT product_id, list_price FROM products ORDER BY list_price DESC NULLS LAST FETCH FIRST 3 ROWS WITH TIES;

-- name: order-by-group-sum
-- ordered
SELECT customer_id, sum(qty * price) AS v FROM line_items GROUP BY customer_id ORDER BY v DESC, customer_id LIMIT 10;

-- name: order-by-count-distinct
-- ordered
SELECT customer_id, count(DISTINCT product_id) AS p FROM line_items GROUP BY customer_id ORDER BY p DESC, customer_id LIMIT 10;

------------------------------------------------------------------------
-- Writes, part 1: single-row inserts, defaults, upserts
------------------------------------------------------------------------

-- name: w-insert-customer-columns
INSERT INTO customers (customer_id, name, region_id, signup, tier) VALUES (1001, 'Nouveau Client é', 3, '2024-02-29', 'gold');

-- name: r-after-insert-customer
-- ordered
SELECT * FROM customers WHERE customer_id > 1000 AND customer_id < 2000 ORDER BY customer_id;

-- name: w-insert-customer-no-columns
INSERT INTO customers VALUES (1002, '日本語 顧客 🎌', NULL, NULL, NULL);

-- name: w-insert-customer-partial-columns
INSERT INTO customers (customer_id, name) VALUES (1003, 'Ærøskøbing Ltd');

-- name: w-insert-customer-expression-key
INSERT INTO customers (customer_id, name, tier) VALUES (1000 + 4, upper('straße'), 'silver');

-- name: r-after-customer-inserts
-- ordered
SELECT customer_id, name, region_id, signup, tier FROM customers WHERE customer_id > 1000 AND customer_id < 2000 ORDER BY customer_id;

-- name: w-insert-order-default
INSERT INTO orders (order_id, customer_id, placed_at, status, total, note) VALUES (500001, 1001, '2024-03-01 10:00:00+01', DEFAULT, 19.99, NULL);

-- name: w-insert-order-omitted-default
INSERT INTO orders (order_id, customer_id, total) VALUES (500002, 1001, 5.5);

-- name: w-insert-order-no-columns
INSERT INTO orders VALUES (500003, 1002, '2024-03-02 23:30:00-08', 'paid', 12.345, 'Größe XL');

-- name: r-after-order-inserts
SELECT count(*), sum(total) FROM orders;

-- name: r-new-orders
-- ordered
SELECT order_id, customer_id, placed_at, status, total, note FROM orders WHERE order_id >= 500000 ORDER BY order_id;

-- name: w-insert-returning
INSERT INTO orders (order_id, customer_id, placed_at, total) VALUES (500004, 1003, '2024-12-31 23:59:59.999+14', -0.01) RETURNING order_id, status, total, placed_at;

-- name: w-insert-returning-star
INSERT INTO events (event_id, customer_id, at, payload, score) VALUES (900001, 1001, '2024-02-29 12:00', '{"q":"日本語"}', 1.25) RETURNING *;

-- name: r-after-event-insert
SELECT count(*), sum(score), count(DISTINCT kind) FROM events;

-- name: w-insert-multi-row-multi-shard
INSERT INTO customers (customer_id, name, region_id, signup, tier) VALUES
  (1005, 'Zoë Dvořák', 5, '2023-06-15', 'bronze'),
  (1006, 'Σωκράτης Ünal', 10, '2022-01-01', NULL),
  (1007, NULL, NULL, '2021-12-31', 'gold'),
  (1008, 'Владимир Кузнецов', 8, NULL, 'silver');

-- name: r-after-multi-row
SELECT count(*), count(name), count(tier) FROM customers;

-- name: w-insert-line-items-multi
INSERT INTO line_items (customer_id, order_id, line_no, product_id, qty, price) VALUES
  (1001, 500001, 1, 5, 2, 9.99),
  (1001, 500001, 2, 7, DEFAULT, 0.01),
  (1002, 500003, 1, NULL, -1, 12.35);

-- name: r-after-line-items-insert
SELECT count(*), sum(qty), sum(qty * price) FROM line_items;

-- name: w-upsert-do-nothing
INSERT INTO customers (customer_id, name) VALUES (1, 'should not change') ON CONFLICT (customer_id) DO NOTHING;

-- name: w-upsert-do-nothing-no-target
INSERT INTO customers (customer_id, name) VALUES (2, 'nor this') ON CONFLICT DO NOTHING;

-- name: w-upsert-do-update
INSERT INTO customers (customer_id, name, tier) VALUES (4, 'Upserted Ünal', 'gold') ON CONFLICT (customer_id) DO UPDATE SET name = EXCLUDED.name, tier = EXCLUDED.tier;

-- name: w-upsert-do-update-returning
INSERT INTO customers (customer_id, name, tier) VALUES (1003, 'ignored', 'platinum') ON CONFLICT (customer_id) DO UPDATE SET tier = EXCLUDED.tier || '/' || customers.tier RETURNING customer_id, name, tier;

-- name: w-upsert-do-update-where
INSERT INTO orders (order_id, customer_id, status, total) VALUES (500002, 1001, 'paid', 6.75)
ON CONFLICT (customer_id, order_id) DO UPDATE SET total = orders.total + EXCLUDED.total, status = EXCLUDED.status WHERE orders.status = 'new';

-- name: r-after-upserts
-- ordered
SELECT customer_id, name, tier FROM customers WHERE customer_id IN (1, 2, 4, 1003) ORDER BY customer_id;

-- name: r-after-order-upsert
SELECT order_id, status, total FROM orders WHERE customer_id = 1001;

-- name: w-upsert-multi-row
INSERT INTO orders (order_id, customer_id, status, total) VALUES (500005, 1005, 'new', 1), (500002, 1001, 'shipped', 2)
ON CONFLICT (customer_id, order_id) DO UPDATE SET status = EXCLUDED.status;

-- name: r-after-upsert-multi-row
SELECT count(*), sum(total), string_agg(status, ',' ORDER BY order_id) FROM orders WHERE order_id >= 500000;

-- name: w-insert-duplicate-key
INSERT INTO customers (customer_id, name) VALUES (5, 'duplicate');

-- name: w-insert-null-key
INSERT INTO orders (order_id, customer_id, total) VALUES (500099, NULL, 1);

-- name: w-insert-bad-numeric
INSERT INTO orders (order_id, customer_id, total) VALUES (500098, 1001, 12345678901.5);

-- name: r-after-failed-inserts
SELECT count(*), sum(total) FROM orders;

