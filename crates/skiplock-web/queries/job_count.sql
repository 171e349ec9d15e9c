-- How many jobs match the filters ($1 status, $2 queue, $3 kind, each ignored when NULL), up
-- to $4: a count over a LIMITed subquery, so it stops at $4 rows and the dashboard shows
-- "$4+" beyond it. Only jobs with an id of at least $5 count (no bound when NULL): for a filter
-- no index serves, the end of the scan budget, so that the count reads a bounded range of the
-- primary key. Queued jobs are counted through their two partial indexes, and with $6 held
-- jobs only, as in job_list_older.sql; with $7, only jobs in that display state (the same
-- expression as job_list_older.sql's, the library's jobs_list.sql).
SELECT count(*) AS n
FROM (SELECT 1
      FROM {schema}.jobs j
      CROSS JOIN LATERAL (
        SELECT CASE
                 WHEN j.status = 'queued' AND j.held IS NOT NULL THEN 'waiting'
                 WHEN j.status = 'queued' AND j.attempts > 0 AND j.last_error IS NOT NULL
                   THEN 'retrying'
                 WHEN j.status = 'queued' AND j.run_at > now() THEN 'scheduled'
                 WHEN j.status = 'queued' THEN 'available'
                 WHEN j.status = 'failed' AND j.last_error = 'cancelled' THEN 'cancelled'
                 ELSE j.status
               END AS state
      ) s
      WHERE ($1::text IS NULL OR j.status = $1::text)
        AND ($1::text IS DISTINCT FROM 'queued'
             OR (NOT $6::bool AND j.status = 'queued' AND j.held IS NULL)
             OR (j.held IS NOT NULL AND j.status = 'queued'))
        AND ($2::text IS NULL OR j.queue = $2::text)
        AND ($3::text IS NULL OR j.kind = $3::text)
        AND ($5::int8 IS NULL OR j.id >= $5::int8)
        AND ($7::text IS NULL OR s.state = $7::text)
      LIMIT $4) m
