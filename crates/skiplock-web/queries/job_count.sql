-- How many jobs match the filters ($1 status, $2 queue, $3 kind, each ignored when NULL), up
-- to $4: a count over a LIMITed subquery, so it stops at $4 rows and the dashboard shows
-- "$4+" beyond it. Only jobs with an id of at least $5 count (no bound when NULL): for a filter
-- no index serves, the end of the scan budget, so that the count reads a bounded range of the
-- primary key. Queued jobs are counted through their two partial indexes, and with $6 held
-- jobs only, as in job_list_older.sql.
SELECT count(*) AS n
FROM (SELECT 1
      FROM {schema}.jobs
      WHERE ($1::text IS NULL OR status = $1::text)
        AND ($1::text IS DISTINCT FROM 'queued'
             OR (NOT $6::bool AND status = 'queued' AND held IS NULL)
             OR (held IS NOT NULL AND status = 'queued'))
        AND ($2::text IS NULL OR queue = $2::text)
        AND ($3::text IS NULL OR kind = $3::text)
        AND ($5::int8 IS NULL OR id >= $5::int8)
      LIMIT $4) m
