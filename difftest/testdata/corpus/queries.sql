-- name: smoke-count
SELECT count(*) FROM customers;
-- name: smoke-ref
-- ordered
SELECT * FROM regions ORDER BY region_id;
