-- The page before one of the job list: the $5 jobs just above id $4 that match the filters
-- ($1 status, $2 queue, $3 kind, each ignored when NULL), read upwards from $4 up to id $6
-- (no bound when NULL: the scan budget's end, job_scan_newer.sql) and shown newest first by
-- the caller. The columns, and the queued branches and $7 (held jobs only), are those of
-- job_list_older.sql.
SELECT id, queue, kind, status, priority, attempts, max_attempts,
       extract(epoch FROM run_at)::float8                 AS run_at,
       extract(epoch FROM created_at)::float8             AS created_at,
       extract(epoch FROM finished_at)::float8            AS finished_at,
       extract(epoch FROM locked_until)::float8           AS locked_until,
       left(last_error, 200)                              AS last_error,
       held,
       extract(epoch FROM now())::float8                  AS now
FROM {schema}.jobs
WHERE ($1::text IS NULL OR status = $1::text)
  AND ($1::text IS DISTINCT FROM 'queued'
       OR (NOT $7::bool AND status = 'queued' AND held IS NULL)
       OR (held IS NOT NULL AND status = 'queued'))
  AND ($2::text IS NULL OR queue = $2::text)
  AND ($3::text IS NULL OR kind = $3::text)
  AND id > $4::int8
  AND ($6::int8 IS NULL OR id <= $6::int8)
ORDER BY id ASC
LIMIT $5
