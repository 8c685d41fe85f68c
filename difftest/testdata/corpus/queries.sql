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
-- Statements starting with INSERT, UPDATE, DELETE, or transaction control
-- (or marked '-- write') are writes. Reads also run a second time over the extended protocol (unnamed
-- statement, no parameters); writes run once, over the simple protocol.
-- Other comment lines are ignored.
--
-- Writes and state: the coordinator runs each statement first, and the
-- oracle runs it only when the coordinator did not refuse it (0A000). A
-- refused statement has changed nothing on the fleet (refusals come before
-- execution), so both databases stay equal and later reads stay comparable.
-- In a transaction block (BEGIN, ..., COMMIT as separate statements, all on
-- one connection per side) a refusal fails the coordinator's transaction:
-- the oracle's is failed too (SELECT 1/0), so the rest of the block fails,
-- and rolls back, on both. Writes after a refused write must therefore not
-- depend on it having happened; each write is followed by a read that
-- checks what it did. Transaction control (BEGIN, COMMIT, ...) runs once,
-- like a write.

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
SELECT * FROM events WHERE event_id = 2501;

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

-- name: ilike-ascii-case
SELECT customer_id, name FROM customers WHERE name ILIKE 'josé%' OR name ILIKE '%SMITH';

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
SELECT event_id, score FROM events WHERE score > 740;

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

------------------------------------------------------------------------
-- Window functions
------------------------------------------------------------------------

-- name: window-row-number-per-customer
SELECT customer_id, order_id, row_number() OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders;

-- name: window-running-total-per-customer
SELECT customer_id, order_id, total, sum(total) OVER (PARTITION BY customer_id ORDER BY order_id) AS running FROM orders;

-- name: window-rank-global
SELECT customer_id, order_id, total, rank() OVER (ORDER BY total DESC NULLS LAST) FROM orders;

-- name: window-dense-rank-status
SELECT order_id, customer_id, status, dense_rank() OVER (PARTITION BY status ORDER BY total, order_id) FROM orders;

-- name: window-lag-lead
SELECT customer_id, order_id, lag(total) OVER w, lead(order_id) OVER w FROM orders WINDOW w AS (PARTITION BY customer_id ORDER BY order_id);

-- name: window-top-n-per-customer
SELECT customer_id, order_id, total FROM (
  SELECT customer_id, order_id, total, row_number() OVER (PARTITION BY customer_id ORDER BY total DESC NULLS LAST, order_id) AS rn FROM orders
) s WHERE rn <= 2;

-- name: window-count-partition
SELECT DISTINCT customer_id, count(*) OVER (PARTITION BY customer_id) FROM line_items;

-- name: window-ntile-events
SELECT event_id, ntile(4) OVER (ORDER BY event_id) FROM events WHERE event_id < 200;

-- name: window-first-last-value
SELECT customer_id, order_id, first_value(status) OVER w, last_value(status) OVER w FROM orders
WINDOW w AS (PARTITION BY customer_id ORDER BY order_id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING);

-- name: window-percent-rank
SELECT product_id, list_price, percent_rank() OVER (ORDER BY list_price NULLS FIRST, product_id), cume_dist() OVER (ORDER BY list_price NULLS FIRST, product_id) FROM products;

-- name: window-moving-avg
SELECT event_id, avg(score) OVER (ORDER BY event_id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM events WHERE event_id <= 100;

-- name: window-over-aggregate
SELECT status, count(*), sum(count(*)) OVER () AS all_orders FROM orders GROUP BY status;

-- name: window-share-of-total
SELECT kind, count(*), round(100.0 * count(*) / sum(count(*)) OVER (), 2) AS pct FROM events GROUP BY kind;

-- name: window-ordered-output
-- ordered
SELECT customer_id, order_id, row_number() OVER (ORDER BY customer_id, order_id) AS rn FROM orders ORDER BY rn LIMIT 20;

-- name: window-by-region-join
SELECT c.region_id, c.customer_id, rank() OVER (PARTITION BY c.region_id ORDER BY c.customer_id) FROM customers c JOIN regions r USING (region_id);

------------------------------------------------------------------------
-- CTEs and subqueries
------------------------------------------------------------------------

-- name: cte-simple
WITH big AS (SELECT customer_id, order_id, total FROM orders WHERE total > 100)
SELECT count(*), sum(total) FROM big;

-- name: cte-aggregate-then-filter
WITH per AS (SELECT customer_id, sum(total) AS spent FROM orders GROUP BY customer_id)
SELECT customer_id, spent FROM per WHERE spent > 500;

-- name: cte-two
WITH o AS (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id),
     l AS (SELECT customer_id, count(*) AS n FROM line_items GROUP BY customer_id)
SELECT o.customer_id, o.n, l.n FROM o JOIN l USING (customer_id);

-- name: cte-reference
WITH r AS (SELECT region_id, name FROM regions WHERE country IN ('CA', 'FR'))
SELECT c.customer_id, r.name FROM customers c JOIN r USING (region_id);

-- name: cte-materialized
WITH m AS MATERIALIZED (SELECT kind, count(*) AS n FROM events GROUP BY kind)
SELECT * FROM m WHERE n > 100;

-- name: cte-recursive-numbers
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10)
SELECT i, (SELECT count(*) FROM regions WHERE region_id = i) FROM n;

-- name: subquery-pinned-same-value
-- ordered
SELECT order_id, total FROM orders WHERE customer_id = 17 AND order_id IN (SELECT order_id FROM line_items WHERE customer_id = 17 AND qty > 1) ORDER BY order_id;

-- name: subquery-pinned-exists-and-scalar
-- ordered
SELECT c.customer_id, c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = 25) AS n FROM customers c WHERE c.customer_id = 25 AND EXISTS (SELECT 1 FROM line_items li WHERE li.customer_id = 25) ORDER BY 1;

-- name: subquery-pinned-not-in
SELECT count(*) FROM orders WHERE customer_id = 12 AND order_id NOT IN (SELECT order_id FROM line_items WHERE customer_id = 12);

-- name: cte-pinned-derived
-- ordered
WITH o AS (SELECT order_id, total FROM orders WHERE customer_id = 33) SELECT o.order_id, o.total, d.lines FROM o JOIN (SELECT order_id, count(*) AS lines FROM line_items WHERE customer_id = 33 GROUP BY order_id) d USING (order_id) ORDER BY 1;

-- name: subquery-pinned-other-value
SELECT count(*) FROM orders WHERE customer_id = 17 AND order_id IN (SELECT order_id FROM line_items WHERE customer_id = 18);

-- name: subquery-only-pinned
SELECT (SELECT max(total) FROM orders WHERE customer_id = 40), (SELECT count(*) FROM line_items WHERE customer_id = 40);

-- name: cte-single-shard
WITH mine AS (SELECT * FROM orders WHERE customer_id = 33)
SELECT order_id, total FROM mine WHERE total IS NOT NULL;

-- name: in-subquery-colocated
SELECT count(*) FROM orders WHERE customer_id IN (SELECT customer_id FROM customers WHERE tier = 'gold');

-- name: in-subquery-reference
SELECT count(*) FROM line_items WHERE product_id IN (SELECT product_id FROM products WHERE category = 'books');

-- name: not-in-subquery-reference
SELECT count(*) FROM line_items WHERE product_id NOT IN (SELECT product_id FROM products);

-- name: exists-correlated-colocated
SELECT count(*) FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id AND o.status = 'returned');

-- name: not-exists-correlated-colocated
SELECT customer_id FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id);

-- name: exists-non-colocated-events
SELECT count(*) FROM customers c WHERE EXISTS (SELECT 1 FROM events e WHERE e.customer_id = c.customer_id AND e.kind = 'purchase');

-- name: in-subquery-non-colocated
SELECT count(*) FROM events WHERE customer_id IN (SELECT customer_id FROM customers WHERE tier = 'silver');

-- name: scalar-subquery-where
SELECT order_id, customer_id, total FROM orders WHERE total > (SELECT avg(total) * 3 FROM orders);

-- name: scalar-subquery-where-correlated
SELECT customer_id, order_id, total FROM orders o WHERE total = (SELECT max(total) FROM orders o2 WHERE o2.customer_id = o.customer_id) AND customer_id < 40;

-- name: scalar-subquery-select-list-correlated
SELECT c.customer_id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) AS n FROM customers c WHERE c.customer_id < 30;

-- name: scalar-subquery-select-list-reference
SELECT c.customer_id, (SELECT r.name FROM regions r WHERE r.region_id = c.region_id) FROM customers c WHERE c.customer_id BETWEEN 100 AND 130;

-- name: scalar-subquery-uncorrelated
SELECT (SELECT max(total) FROM orders) AS max_total, (SELECT count(*) FROM events) AS events;

-- name: from-subquery-aggregate
SELECT avg(n) FROM (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) s;

-- name: from-subquery-filter
SELECT * FROM (SELECT order_id, customer_id, total FROM orders WHERE status = 'cancelled') s WHERE total > 50;

-- name: from-subquery-single-shard
SELECT sum(v) FROM (SELECT qty * price AS v FROM line_items WHERE customer_id = 44) s;

-- name: lateral-top-order
SELECT c.customer_id, t.order_id, t.total FROM customers c, LATERAL (SELECT order_id, total FROM orders o WHERE o.customer_id = c.customer_id ORDER BY total DESC NULLS LAST, order_id LIMIT 1) t WHERE c.customer_id < 50;

-- name: any-subquery
SELECT count(*) FROM orders WHERE total > ALL (SELECT list_price FROM products WHERE list_price IS NOT NULL);

-- name: in-subquery-tuple
SELECT count(*) FROM line_items WHERE (customer_id, order_id) IN (SELECT customer_id, order_id FROM orders WHERE status = 'paid');

------------------------------------------------------------------------
-- Writes, part 2: updates and deletes
------------------------------------------------------------------------

-- name: w-update-single-row
UPDATE customers SET tier = 'gold' WHERE customer_id = 5;

-- name: r-after-update-single-row
SELECT customer_id, tier FROM customers WHERE customer_id = 5;

-- name: w-update-returning
UPDATE orders SET status = 'shipped', note = 'Versand ✓' WHERE customer_id = 1001 AND order_id = 500001 RETURNING order_id, status, note;

-- name: w-update-single-shard-many-rows
UPDATE orders SET note = coalesce(note, '') || ' ✓' WHERE customer_id = 21;

-- name: r-after-update-single-shard
SELECT order_id, note FROM orders WHERE customer_id = 21;

-- name: w-update-numeric-expression
UPDATE line_items SET price = price * 1.05 WHERE customer_id = 11;

-- name: r-after-update-numeric
SELECT count(*), sum(price), sum(qty * price) FROM line_items;

-- name: w-update-pinned-subquery
UPDATE orders SET note = 'has lines' WHERE customer_id = 17 AND order_id IN (SELECT order_id FROM line_items WHERE customer_id = 17 AND qty >= 1) RETURNING order_id, note;

-- name: r-after-update-pinned-subquery
SELECT order_id, note FROM orders WHERE customer_id = 17;

-- name: w-delete-pinned-exists
DELETE FROM line_items li WHERE li.customer_id = 15 AND EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = 15 AND o.status = 'cancelled');

-- name: r-after-delete-pinned-exists
SELECT count(*) FROM line_items WHERE customer_id = 15;

-- name: w-update-from-colocated
UPDATE orders o SET note = 'gold: ' || c.name FROM customers c WHERE c.customer_id = o.customer_id AND c.tier = 'gold' AND o.total > 400;

-- name: r-after-update-from-colocated
SELECT customer_id, order_id, note FROM orders WHERE note LIKE 'gold: %';

-- name: w-delete-using-colocated
DELETE FROM line_items li USING orders o WHERE o.customer_id = li.customer_id AND o.order_id = li.order_id AND o.status = 'cancelled' AND li.qty > 2 RETURNING li.customer_id, li.order_id, li.line_no;

-- name: r-after-delete-using-colocated
SELECT count(*), sum(qty) FROM line_items;

-- name: w-update-multi-shard
UPDATE orders SET status = 'archived' WHERE placed_at < '2019-02-01 00:00:00+00';

-- name: r-after-update-multi-shard
SELECT status, count(*) FROM orders GROUP BY status;

-- name: w-update-multi-shard-in-list
UPDATE customers SET tier = 'bronze' WHERE customer_id IN (20, 21, 22, 23);

-- name: r-after-update-in-list
SELECT customer_id, tier FROM customers WHERE customer_id BETWEEN 20 AND 23;

-- name: w-update-distribution-column
UPDATE customers SET customer_id = 2005 WHERE customer_id = 1005;

-- name: r-after-update-distribution-column
SELECT customer_id, name FROM customers WHERE customer_id IN (1005, 2005);

-- name: w-update-from-reference
UPDATE orders o SET note = r.name FROM customers c JOIN regions r USING (region_id)
WHERE o.customer_id = c.customer_id AND c.customer_id = 22 AND o.customer_id = 22;

-- name: r-after-update-from-reference
SELECT order_id, note FROM orders WHERE customer_id = 22;

-- name: w-update-events-single
UPDATE events SET score = score + 0.25, payload = 'édité' WHERE event_id = 77;

-- name: r-after-update-events-single
SELECT * FROM events WHERE event_id = 77;

-- name: w-update-events-multi-shard
UPDATE events SET kind = 'click' WHERE kind = 'Click';

-- name: r-after-update-events-multi
SELECT kind, count(*) FROM events GROUP BY kind;

-- name: w-update-no-rows
UPDATE customers SET tier = 'x' WHERE customer_id = 777777;

-- name: w-delete-single-row
DELETE FROM line_items WHERE customer_id = 1001 AND order_id = 500001 AND line_no = 2;

-- name: r-after-delete-single-row
SELECT count(*), sum(qty) FROM line_items;

-- name: w-delete-returning
DELETE FROM events WHERE event_id = 900001 RETURNING event_id, kind, score;

-- name: r-after-delete-returning
SELECT count(*), sum(score) FROM events;

-- name: w-delete-single-shard-many
DELETE FROM line_items WHERE customer_id = 12 AND qty <= 1;

-- name: r-after-delete-single-shard
SELECT count(*) FROM line_items WHERE customer_id = 12;

-- name: w-delete-multi-shard
DELETE FROM events WHERE kind = 'error' AND score < -200;

-- name: r-after-delete-multi-shard
SELECT count(*), sum(score) FROM events;

-- name: w-delete-using
DELETE FROM orders o USING customers c WHERE o.customer_id = c.customer_id AND c.customer_id = 1003 AND o.customer_id = 1003;

-- name: r-after-delete-using
SELECT count(*), sum(total) FROM orders;

-- name: w-delete-no-rows
DELETE FROM customers WHERE customer_id = 888888;

-- name: w-delete-subquery-colocated
DELETE FROM line_items WHERE customer_id = 13 AND order_id IN (SELECT order_id FROM orders WHERE customer_id = 13 AND status = 'cancelled');

-- name: r-after-delete-subquery
SELECT count(*), sum(qty * price) FROM line_items;

------------------------------------------------------------------------
-- Set operations
------------------------------------------------------------------------

-- name: union-customers-events
SELECT customer_id FROM orders UNION SELECT customer_id FROM events;

-- name: union-all-counts
SELECT 'orders' AS t, count(*) FROM orders UNION ALL SELECT 'events', count(*) FROM events UNION ALL SELECT 'regions', count(*) FROM regions;

-- name: intersect-customers
SELECT customer_id FROM customers INTERSECT SELECT customer_id FROM events;

-- name: intersect-all
SELECT status FROM orders WHERE customer_id < 50 INTERSECT ALL SELECT status FROM orders WHERE customer_id >= 50 AND customer_id < 60;

-- name: except-customers-without-events
SELECT customer_id FROM customers EXCEPT SELECT customer_id FROM events;

-- name: except-all
SELECT kind FROM events WHERE event_id < 100 EXCEPT ALL SELECT kind FROM events WHERE event_id < 50;

-- name: union-ordered
-- ordered
SELECT name FROM regions UNION SELECT category FROM products WHERE category IS NOT NULL ORDER BY 1;

-- name: union-single-shard
SELECT order_id FROM orders WHERE customer_id = 8 UNION ALL SELECT order_id FROM line_items WHERE customer_id = 8;

-- name: union-in-subquery
SELECT count(*) FROM (SELECT customer_id FROM orders UNION SELECT customer_id FROM customers) s;

------------------------------------------------------------------------
-- Joins
------------------------------------------------------------------------

-- name: join-colocated-customers-orders
SELECT c.customer_id, c.name, o.order_id, o.total FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.tier = 'gold';

-- name: join-colocated-aggregate
SELECT c.tier, count(*), sum(o.total) FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.tier;

-- name: join-colocated-three-way
SELECT o.status, sum(li.qty * li.price) FROM orders o JOIN line_items li ON li.customer_id = o.customer_id AND li.order_id = o.order_id GROUP BY o.status;

-- name: join-colocated-three-way-customers
SELECT c.customer_id, count(DISTINCT o.order_id), sum(li.qty) FROM customers c JOIN orders o USING (customer_id) JOIN line_items li USING (customer_id, order_id) WHERE c.customer_id < 60 GROUP BY c.customer_id;

-- name: join-colocated-single-shard
SELECT o.order_id, li.line_no, li.qty FROM orders o JOIN line_items li USING (customer_id, order_id) WHERE o.customer_id = 19;

-- name: join-using-natural-columns
SELECT customer_id, order_id, line_no FROM orders JOIN line_items USING (customer_id, order_id) WHERE customer_id BETWEEN 100 AND 110;

-- name: join-reference-regions
SELECT r.name, count(*) FROM customers c JOIN regions r ON r.region_id = c.region_id GROUP BY r.name;

-- name: join-reference-products
SELECT p.category, sum(li.qty) FROM line_items li JOIN products p ON p.product_id = li.product_id GROUP BY p.category;

-- name: join-reference-two
SELECT r.country, p.category, count(*) FROM customers c JOIN regions r USING (region_id) JOIN line_items li USING (customer_id) JOIN products p USING (product_id) GROUP BY 1, 2;

-- name: join-reference-left
SELECT c.customer_id, r.name FROM customers c LEFT JOIN regions r ON r.region_id = c.region_id WHERE c.customer_id < 40;

-- name: join-reference-only
SELECT r.name, p.name FROM regions r JOIN products p ON p.product_id = r.region_id;

-- name: join-reference-cross
SELECT count(*) FROM regions CROSS JOIN products;

-- name: join-left-colocated
SELECT c.customer_id, count(o.order_id) FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id;

-- name: join-left-colocated-null-side
SELECT c.customer_id, c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE o.order_id IS NULL;

-- name: join-right-colocated
SELECT o.order_id, c.name FROM customers c RIGHT JOIN orders o ON o.customer_id = c.customer_id WHERE o.customer_id > 1000 AND o.customer_id < 2000;

-- name: join-full-colocated
SELECT c.customer_id, o.order_id FROM customers c FULL JOIN orders o ON o.customer_id = c.customer_id AND o.total > 500;

-- name: join-left-line-items-products-missing
SELECT li.customer_id, li.order_id, li.line_no, li.product_id FROM line_items li LEFT JOIN products p USING (product_id) WHERE p.product_id IS NULL;

-- name: join-full-reference
SELECT r.region_id, p.product_id FROM regions r FULL JOIN products p ON p.product_id = r.region_id + 30;

-- name: join-non-colocated-events-customers
SELECT c.tier, count(*) FROM events e JOIN customers c ON c.customer_id = e.customer_id GROUP BY c.tier;

-- name: join-non-colocated-events-orders
SELECT count(*) FROM events e JOIN orders o ON o.customer_id = e.customer_id WHERE e.kind = 'purchase' AND o.status = 'paid';

-- name: join-non-colocated-left
SELECT e.event_id, c.name FROM events e LEFT JOIN customers c ON c.customer_id = e.customer_id WHERE e.event_id < 60;

-- name: join-non-colocated-orders-line-items-by-order
SELECT o.status, count(*) FROM orders o JOIN line_items li ON li.order_id = o.order_id GROUP BY o.status;

-- name: join-non-colocated-single-event
SELECT e.event_id, c.name, c.tier FROM events e JOIN customers c ON c.customer_id = e.customer_id WHERE e.event_id = 42;

-- name: join-self-orders-by-customer
SELECT a.customer_id, count(*) FROM orders a JOIN orders b ON a.customer_id = b.customer_id AND a.order_id < b.order_id GROUP BY a.customer_id;

-- name: join-self-events-non-key
SELECT count(*) FROM events a JOIN events b ON a.customer_id = b.customer_id AND a.event_id < b.event_id WHERE a.kind = 'signup';

-- name: join-comma-style
SELECT count(*) FROM customers c, orders o WHERE o.customer_id = c.customer_id AND c.region_id = 3;

-- name: join-generate-series-months
SELECT m::date, count(o.order_id) FROM generate_series('2021-01-01'::timestamptz, '2021-12-01'::timestamptz, '1 month') m
LEFT JOIN orders o ON date_trunc('month', o.placed_at) = m GROUP BY m;

-- name: join-generate-series-ref
SELECT g, r.name FROM generate_series(1, 15) g LEFT JOIN regions r ON r.region_id = g;

-- name: join-values-list
SELECT v.tier, v.rank, count(c.customer_id) FROM (VALUES ('gold', 1), ('silver', 2), ('bronze', 3)) v(tier, rank) LEFT JOIN customers c ON c.tier = v.tier GROUP BY v.tier, v.rank;

-- name: join-with-subquery-aggregate
SELECT c.customer_id, c.name, s.spent FROM customers c JOIN (SELECT customer_id, sum(total) AS spent FROM orders GROUP BY customer_id) s USING (customer_id) WHERE s.spent > 1000;

-- name: join-ordered-limit
-- ordered
SELECT c.customer_id, o.order_id, o.total FROM customers c JOIN orders o USING (customer_id) ORDER BY o.total DESC NULLS LAST, c.customer_id, o.order_id LIMIT 15;

-- name: join-using-pinned
-- ordered
SELECT o.order_id, c.name, o.total FROM customers c JOIN orders o USING (customer_id) WHERE c.customer_id = 17 ORDER BY o.order_id;

-- name: join-using-two-columns-pinned
SELECT count(*), sum(li.qty), min(li.price) FROM orders o JOIN line_items li USING (customer_id, order_id) WHERE o.customer_id = 25;

-- name: join-using-merged-column-pinned
-- ordered
SELECT customer_id, order_id, line_no FROM orders JOIN line_items USING (customer_id, order_id) WHERE customer_id = 12 ORDER BY 2, 3;

-- name: join-using-left-three
-- ordered
SELECT c.customer_id, count(o.order_id), count(li.line_no) FROM customers c LEFT JOIN orders o USING (customer_id) LEFT JOIN line_items li USING (customer_id, order_id) WHERE c.customer_id = 3 GROUP BY c.customer_id ORDER BY 1;

-- name: join-using-full-pinned
SELECT count(*) FROM customers c FULL JOIN orders o USING (customer_id) WHERE o.customer_id = 42;

------------------------------------------------------------------------
-- DISTINCT, CASE, dates, casts, string functions
------------------------------------------------------------------------

-- name: distinct-status
SELECT DISTINCT status FROM orders;

-- name: distinct-two-columns
SELECT DISTINCT kind, customer_id IS NULL AS anon FROM events;

-- name: distinct-on-latest-order
SELECT DISTINCT ON (customer_id) customer_id, order_id, placed_at FROM orders ORDER BY customer_id, placed_at DESC NULLS LAST, order_id;

-- name: distinct-on-ordered
-- ordered
SELECT DISTINCT ON (kind) kind, event_id, score FROM events ORDER BY kind, score DESC NULLS LAST, event_id;

-- name: distinct-count-expr
SELECT count(DISTINCT date_trunc('month', placed_at)) FROM orders;

-- name: case-searched
SELECT customer_id, CASE tier WHEN 'gold' THEN 3 WHEN 'silver' THEN 2 WHEN 'bronze' THEN 1 ELSE 0 END AS level FROM customers WHERE customer_id < 50;

-- name: case-in-aggregate
SELECT sum(CASE WHEN qty < 0 THEN -qty ELSE 0 END) AS returned, sum(CASE WHEN qty > 0 THEN qty END) AS sold FROM line_items;

-- name: date-trunc-month-group
SELECT date_trunc('month', placed_at) AS m, count(*), sum(total) FROM orders WHERE placed_at >= '2022-01-01+00' AND placed_at < '2023-01-01+00' GROUP BY m;

-- name: date-trunc-week-events
SELECT date_trunc('week', at) AS w, count(*) FROM events WHERE at < '2020-03-01' GROUP BY 1;

-- name: extract-year-dow
SELECT extract(year FROM placed_at) AS y, extract(dow FROM placed_at) AS d, count(*) FROM orders GROUP BY 1, 2;

-- name: extract-epoch
SELECT order_id, extract(epoch FROM placed_at) FROM orders WHERE customer_id = 15;

-- name: date-part-quarter
SELECT date_part('quarter', signup) AS q, count(*) FROM customers GROUP BY q;

-- name: timezone-conversion
SELECT order_id, placed_at AT TIME ZONE 'Asia/Tokyo', placed_at AT TIME ZONE 'America/New_York' FROM orders WHERE customer_id = 23;

-- name: timestamp-arithmetic
SELECT event_id, at + interval '1 day 2 hours', at - '2020-01-01'::timestamp FROM events WHERE event_id BETWEEN 200 AND 220;

-- name: age-and-interval
SELECT customer_id, age('2025-01-01'::date, signup) FROM customers WHERE customer_id BETWEEN 60 AND 80;

-- name: to-char-dates
SELECT to_char(placed_at, 'YYYY-MM-DD HH24:MI TZ') AS s, count(*) FROM orders WHERE customer_id < 30 GROUP BY 1;

-- name: cast-numeric-text
SELECT order_id, total::text, total::int, total::float8, cast(total AS numeric(14,4)) FROM orders WHERE customer_id = 18;

-- name: cast-text-to-int
SELECT count(*) FROM events WHERE event_id::text LIKE '1%';

-- name: cast-date-timestamp
SELECT customer_id, signup::timestamp, signup::timestamptz FROM customers WHERE customer_id < 10;

-- name: cast-float-numeric
SELECT event_id, score::numeric(10,2), score::int FROM events WHERE event_id < 30;

-- name: round-trunc-numeric
SELECT round(sum(total) / 3, 2), trunc(avg(total), 1), ceil(max(total)), floor(min(total)) FROM orders;

-- name: numeric-division-scale
SELECT customer_id, sum(total) / count(*) FROM orders WHERE customer_id < 20 GROUP BY customer_id;

-- name: integer-division-modulo
SELECT order_id % 7 AS bucket, count(*), sum(order_id / 100) FROM orders GROUP BY 1;

-- name: string-upper-lower-non-ascii
SELECT customer_id, upper(name), lower(name), initcap(name) FROM customers WHERE customer_id < 40;

-- name: string-length-octets
SELECT name, length(name), octet_length(name), char_length(name) FROM regions;

-- name: string-substr-position
SELECT customer_id, substr(name, 1, 3), position(' ' IN name), left(name, 2), right(name, 2) FROM customers WHERE customer_id BETWEEN 200 AND 230;

-- name: string-concat
SELECT c.customer_id, c.name || ' (' || coalesce(c.tier, '-') || ')' , concat_ws('/', c.name, c.tier, c.region_id) FROM customers c WHERE c.customer_id < 25;

-- name: string-replace-translate
SELECT replace(note, 'ß', 'ss'), translate(note, 'éü', 'eu') FROM orders WHERE customer_id < 60 AND note IS NOT NULL;

-- name: string-split-part
SELECT split_part(name, ' ', 1) AS first, count(*) FROM customers GROUP BY 1;

-- name: string-trim-pad
SELECT tier, length(tier), btrim(tier), lpad(coalesce(tier, ''), 8, '*'), rpad(coalesce(tier, ''), 8, 'é') FROM customers WHERE customer_id < 20;

-- name: string-md5
SELECT customer_id, md5(coalesce(name, '')) FROM customers WHERE customer_id BETWEEN 250 AND 270;

-- name: string-regexp-replace
SELECT regexp_replace(payload, '[^a-z]', '', 'g') AS letters, count(*) FROM events GROUP BY 1;

-- name: string-reverse-repeat
SELECT reverse(name), repeat('ab', region_id) FROM regions;

-- name: string-starts-with
SELECT count(*) FROM customers WHERE starts_with(name, 'Jos');

-- name: string-agg-names-by-region
SELECT region_id, string_agg(coalesce(name, '∅'), '; ' ORDER BY customer_id) FROM customers WHERE customer_id < 100 GROUP BY region_id;

-- name: json-build
SELECT json_build_object('id', customer_id, 'name', name, 'tier', tier) FROM customers WHERE customer_id < 8;

-- name: coalesce-greatest-least
SELECT customer_id, greatest(qty, 0), least(price, 10.00), coalesce(product_id, -1) FROM line_items WHERE customer_id = 27;

-- name: boolean-columns
SELECT event_id, score > 0 AS pos, payload IS NULL AS nopayload FROM events WHERE event_id < 25;

-- name: generate-series-numbers-only
SELECT g, g * g FROM generate_series(1, 10) g;

-- name: values-only
SELECT * FROM (VALUES (1, 'é'), (2, '日本語'), (3, NULL)) v(i, t);

-- name: current-setting-timezone
SELECT current_setting('TimeZone');

------------------------------------------------------------------------
-- Writes, part 3: reference tables, INSERT ... SELECT, transaction blocks
------------------------------------------------------------------------

-- name: w-ref-insert
INSERT INTO regions (region_id, name, country) VALUES (13, 'Ταΰγετος', 'GR');

-- name: w-ref-insert-no-columns
INSERT INTO regions VALUES (14, 'Hokkaidō 北海道', 'JP');

-- name: r-after-ref-insert
-- ordered
SELECT * FROM regions ORDER BY region_id;

-- name: w-ref-update
UPDATE products SET list_price = list_price * 1.10 WHERE category = 'books';

-- name: r-after-ref-update
SELECT product_id, list_price FROM products WHERE category = 'books';

-- name: w-ref-update-returning
UPDATE products SET name = name || ' ✨' WHERE product_id = 3 RETURNING product_id, name;

-- name: w-ref-upsert
INSERT INTO products (product_id, name, category, list_price) VALUES (3, 'Replaced', 'toys', 1.00), (41, 'Brand-new Gerät', 'électronique', 199.99)
ON CONFLICT (product_id) DO UPDATE SET list_price = EXCLUDED.list_price;

-- name: r-after-ref-upsert
SELECT count(*), sum(list_price), max(name) FROM products;

-- name: w-ref-delete
DELETE FROM regions WHERE region_id = 13;

-- name: w-ref-delete-returning
DELETE FROM products WHERE product_id = 41 RETURNING *;

-- name: r-after-ref-deletes
SELECT (SELECT count(*) FROM regions), (SELECT count(*) FROM products);

-- name: w-insert-select-colocated
INSERT INTO line_items (customer_id, order_id, line_no, product_id, qty, price)
SELECT customer_id, order_id, 99, NULL, 1, 0 FROM orders WHERE customer_id = 1001;

-- name: r-after-insert-select-colocated
SELECT count(*), sum(price) FROM line_items WHERE line_no = 99;

-- name: w-insert-select-non-colocated
INSERT INTO events (event_id, customer_id, kind, payload) SELECT 800000 + customer_id, customer_id, 'backfill', name FROM customers WHERE customer_id BETWEEN 1001 AND 1010;

-- name: r-after-insert-select-non-colocated
SELECT count(*) FROM events WHERE kind = 'backfill';

-- name: w-insert-select-from-reference
INSERT INTO orders (order_id, customer_id, status, total, note) SELECT 600000 + product_id, 1008, 'new', list_price, name FROM products WHERE product_id <= 3;

-- name: r-after-insert-select-reference
SELECT count(*), sum(total) FROM orders;

-- name: w-insert-select-into-reference
INSERT INTO regions (region_id, name, country) SELECT 20 + region_id, name || ' Süd', country FROM regions WHERE region_id <= 2;

-- name: r-after-insert-select-into-reference
SELECT count(*) FROM regions;

-- name: w-transaction-single-shard
BEGIN;
INSERT INTO orders (order_id, customer_id, status, total) VALUES (500010, 1006, 'paid', 10.10);
INSERT INTO line_items (customer_id, order_id, line_no, product_id, qty, price) VALUES (1006, 500010, 1, 2, 1, 10.10);
COMMIT;

-- name: r-after-transaction-single-shard
SELECT o.order_id, o.total, li.line_no, li.price FROM orders o JOIN line_items li USING (customer_id, order_id) WHERE o.customer_id = 1006;

-- name: w-transaction-two-shards
BEGIN;
UPDATE customers SET tier = 'silver' WHERE customer_id = 1006;
UPDATE customers SET tier = 'silver' WHERE customer_id = 1008;
COMMIT;

-- name: r-after-transaction-two-shards
SELECT customer_id, tier FROM customers WHERE customer_id IN (1006, 1008);

-- name: w-transaction-rollback
BEGIN;
DELETE FROM customers WHERE customer_id = 1007;
ROLLBACK;

-- name: r-after-transaction-rollback
SELECT count(*) FROM customers;

-- name: w-events-multi-row
INSERT INTO events (event_id, customer_id, kind, at, payload, score) VALUES
  (900010, 1, DEFAULT, '2024-05-05 05:05:05.5', 'ünïcödé', -0.75),
  (900011, NULL, 'signup', NULL, NULL, NULL),
  (900012, 9000000050, 'purchase', '1999-12-31 23:59:59', '🔥', 1e3),
  (900013, 2, 'view', '2024-02-29', '', 0);

-- name: r-after-events-multi-row
SELECT count(*), sum(score), count(at), count(payload) FROM events;

-- name: r-new-events
-- ordered
SELECT * FROM events WHERE event_id >= 900000 ORDER BY event_id;

-- name: w-insert-timestamptz-offsets
INSERT INTO orders (order_id, customer_id, placed_at, status, total) VALUES
  (500020, 1004, '2024-03-10 02:30:00 America/New_York', 'paid', 0.005),
  (500021, 1004, '2024-10-27 02:30:00 Europe/Berlin', 'paid', -0.005),
  (500022, 1008, 'epoch', 'new', 99999999.99);

-- name: r-after-timestamptz-inserts
-- ordered
SELECT order_id, placed_at, total FROM orders WHERE order_id BETWEEN 500020 AND 500029 ORDER BY order_id;

-- name: w-delete-customer
DELETE FROM customers WHERE customer_id = 1007 RETURNING customer_id, name, tier;

-- name: w-update-set-null
UPDATE orders SET note = NULL, total = NULL WHERE customer_id = 1008 AND order_id = 500022;

-- name: r-final-orders
SELECT count(*), count(total), sum(total), count(note) FROM orders;

-- name: r-final-line-items
SELECT count(*), sum(qty), sum(qty * price) FROM line_items;

-- name: r-final-customers
SELECT count(*), count(name), count(tier), sum(customer_id) FROM customers;

-- name: r-final-events
SELECT count(*), sum(score), count(DISTINCT kind) FROM events;

-- name: r-final-join-after-writes
SELECT c.tier, count(o.order_id), sum(o.total) FROM customers c LEFT JOIN orders o USING (customer_id) GROUP BY c.tier;

------------------------------------------------------------------------
-- Writes, part 4: transaction blocks statement by statement, more routed writes
------------------------------------------------------------------------

-- name: tx1-begin
BEGIN;

-- name: tx1-insert-order
INSERT INTO orders (order_id, customer_id, placed_at, status, total, note) VALUES (500030, 1005, '2024-06-01 08:00:00+02', 'paid', 42.42, 'Tx ✓');

-- name: tx1-insert-line
INSERT INTO line_items (customer_id, order_id, line_no, product_id, qty, price) VALUES (1005, 500030, 1, 9, 3, 14.14);

-- name: tx1-read-own-write
SELECT order_id, total FROM orders WHERE customer_id = 1005;

-- name: tx1-update-customer
UPDATE customers SET tier = 'gold' WHERE customer_id = 1005;

-- name: tx1-commit
COMMIT;

-- name: r-after-tx1
SELECT c.customer_id, c.tier, o.order_id, o.total, li.qty FROM customers c JOIN orders o USING (customer_id) JOIN line_items li USING (customer_id, order_id) WHERE c.customer_id = 1005;

-- name: tx2-begin
BEGIN;

-- name: tx2-delete
DELETE FROM orders WHERE customer_id = 1004 AND order_id = 500020;

-- name: tx2-rollback
ROLLBACK;

-- name: r-after-tx2
SELECT order_id FROM orders WHERE customer_id = 1004;

-- name: tx3-begin
BEGIN;

-- name: tx3-reference-write
UPDATE regions SET country = 'FR' WHERE region_id = 11;

-- name: tx3-distributed-write
UPDATE customers SET region_id = 11 WHERE customer_id = 1006;

-- name: tx3-commit
COMMIT;

-- name: r-after-tx3
SELECT c.customer_id, r.name, r.country FROM customers c JOIN regions r USING (region_id) WHERE c.customer_id = 1006;

-- name: tx4-begin
BEGIN;

-- name: tx4-refused-write
UPDATE orders SET note = 'all' WHERE note IS NULL;

-- name: tx4-after-refusal
INSERT INTO customers (customer_id, name) VALUES (1020, 'in a failed transaction');

-- name: tx4-commit
COMMIT;

-- name: r-after-tx4
SELECT count(*) FROM customers WHERE customer_id = 1020;

-- name: w-insert-cast-key
INSERT INTO customers (customer_id, name, region_id, signup, tier) VALUES ('1009'::bigint, 'Cast Key', '2', '2020-02-02'::date, 'bronze');

-- name: w-insert-text-key
INSERT INTO customers (customer_id, name) VALUES ('1010', 'Text Literal Key');

-- name: r-after-cast-key-inserts
SELECT customer_id, name, region_id, signup FROM customers WHERE customer_id IN (1009, 1010);

-- name: w-upsert-distribution-column
INSERT INTO customers (customer_id, name) VALUES (1009, 'x') ON CONFLICT (customer_id) DO UPDATE SET customer_id = EXCLUDED.customer_id + 1000;

-- name: r-after-upsert-distribution-column
SELECT count(*), max(customer_id) FROM customers WHERE customer_id BETWEEN 1000 AND 3000;

-- name: w-update-subquery-reference
UPDATE customers SET region_id = (SELECT region_id FROM regions WHERE name = 'Bayern') WHERE customer_id = 1008;

-- name: r-after-update-subquery-reference
SELECT customer_id, region_id FROM customers WHERE customer_id = 1008;

-- name: w-update-events-returning-expr
UPDATE events SET score = score * 2, at = at + interval '1 hour' WHERE event_id = 900013 RETURNING event_id, score, at, upper(kind);

-- name: w-delete-all-of-customer
DELETE FROM orders WHERE customer_id = 1004;

-- name: r-after-delete-all-of-customer
SELECT count(*), sum(total) FROM orders WHERE customer_id = 1004;

-- name: w-update-line-items-single-shard
UPDATE line_items SET qty = qty + 1 WHERE customer_id = 28 AND product_id IS NOT NULL;

-- name: r-after-update-line-items
SELECT sum(qty), count(*) FROM line_items WHERE customer_id = 28;

-- name: w-insert-empty-strings
INSERT INTO orders (order_id, customer_id, placed_at, status, total, note) VALUES (500040, 1010, NULL, '', 0, '');

-- name: r-after-empty-strings
SELECT order_id, status, total, note, note = '' AS empty FROM orders WHERE customer_id = 1010;

-- name: w-delete-event-by-key
DELETE FROM events WHERE event_id = 900011;

-- name: r-after-delete-event
SELECT count(*), count(customer_id) FROM events;

------------------------------------------------------------------------
-- Writes over several shards that read the transaction's time, and NULL
-- distribution values (notes starts empty). The moment differs between
-- the two databases: the reads compare what PostgreSQL makes equal.
------------------------------------------------------------------------

-- name: time-insert-defaults
INSERT INTO notes (note_id, customer_id, body) VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c'), (4, 4, 'd'), (5, 5, 'e'), (6, 6, 'f');

-- name: time-insert-defaults-one-moment
SELECT count(*), count(DISTINCT created), count(DISTINCT day), bool_and(day = created::date), bool_and(created <= now()) FROM notes;

-- name: time-insert-default-keyword
INSERT INTO notes VALUES (7, 7, 'g', DEFAULT, DEFAULT), (8, 8, 'h', DEFAULT, '2020-02-02');

-- name: time-insert-default-keyword-check
-- ordered
SELECT note_id, created = (SELECT created FROM notes WHERE note_id = 7), day FROM notes WHERE note_id IN (7, 8) AND day = '2020-02-02' OR note_id = 7 AND day = created::date ORDER BY note_id;

-- name: time-update-now
UPDATE notes SET created = now() + interval '1 hour', body = upper(body) WHERE note_id <= 4;

-- name: time-update-now-check
SELECT count(DISTINCT created), bool_and(created > now()), string_agg(body, ',' ORDER BY body) FROM notes WHERE note_id <= 4;

-- name: time-update-current-date
UPDATE notes SET day = CURRENT_DATE - 1 WHERE note_id > 4;

-- name: time-update-current-date-check
SELECT count(DISTINCT day), bool_and(day = CURRENT_DATE - 1) FROM notes WHERE note_id > 4;

-- name: time-delete-now
DELETE FROM notes WHERE created > now() + interval '30 minutes' AND note_id % 2 = 0;

-- name: time-delete-now-check
-- ordered
SELECT note_id FROM notes ORDER BY note_id;

-- name: null-dist-insert
INSERT INTO notes (note_id, customer_id, body) VALUES (10, NULL, 'no customer'), (11, 7, 'seven'), (12, NULL, 'none either');

-- name: null-dist-is-null
SELECT note_id, body FROM notes WHERE customer_id IS NULL;

-- name: null-dist-equals-null
SELECT count(*) FROM notes WHERE customer_id = NULL;

-- name: null-dist-in-list
SELECT note_id FROM notes WHERE customer_id IN (NULL, 7);

-- name: null-dist-join
SELECT n.note_id, c.name FROM notes n JOIN customers c USING (customer_id);

-- name: null-dist-left-join
-- ordered
SELECT n.note_id, c.customer_id IS NULL FROM notes n LEFT JOIN customers c USING (customer_id) ORDER BY n.note_id;

-- name: null-dist-group
-- ordered
SELECT customer_id IS NULL AS no_customer, count(*), count(customer_id) FROM notes GROUP BY 1 ORDER BY 1;

-- name: null-dist-order-nulls-first
-- ordered
SELECT note_id, customer_id FROM notes ORDER BY customer_id NULLS FIRST, note_id;

-- name: null-dist-update
UPDATE notes SET body = body || '!' WHERE customer_id IS NULL;

-- name: null-dist-update-check
SELECT note_id, body FROM notes WHERE customer_id IS NULL;

-- name: null-dist-not-null-column
INSERT INTO orders (order_id, customer_id, status) VALUES (990001, NULL, 'lost');

-- name: null-dist-not-null-column-check
SELECT count(*) FROM orders WHERE order_id = 990001;
