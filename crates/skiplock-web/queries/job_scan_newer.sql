-- The end of a scan budget, upwards: the id of the $2-th job above id $1, in primary key
-- order; none when fewer than $2 jobs are there (the scan reaches the newest job). The
-- counterpart of job_scan_older.sql for the list's "newer" pages.
SELECT id
FROM {schema}.jobs
WHERE id > $1::int8
ORDER BY id ASC
OFFSET $2::int8 - 1
LIMIT 1
