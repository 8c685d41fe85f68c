-- scatter: GROUP BY aggregates over a range of 1,000 accounts. aid is the
-- distribution column, but a range of it matches rows in every shard, so the
-- query goes to all of them and the coordinator merges the partial
-- aggregates.
\set lo random(1, :naccounts - 1000)
SELECT bid, count(*), sum(abalance), avg(abalance) FROM pgbench_accounts WHERE aid BETWEEN :lo AND :lo + 999 GROUP BY bid ORDER BY bid;
