-- The end of a scan budget, downwards: the id of the $2-th job below id $1 (below no bound
-- when NULL), in primary key order; none when fewer than $2 jobs are there, so that the scan
-- reaches the oldest job. Filters no index serves (done, failed, queue, kind) are then read
-- only in [this id, $1): at most $2 rows, however large the table. It reads the primary key
-- alone ($2 entries at most).
SELECT id
FROM {schema}.jobs
WHERE ($1::int8 IS NULL OR id < $1::int8)
ORDER BY id DESC
OFFSET $2::int8 - 1
LIMIT 1
