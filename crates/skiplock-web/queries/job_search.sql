-- Payload search: the jobs whose payload, as text, contains $1 (ignoring case), newest first,
-- at most $3, among the jobs with an id of at least $2 (no bound when NULL): the end of the
-- newest N jobs (job_scan_older.sql), so that a search reads a bounded range of the primary
-- key, backwards, however rare the matches are. Columns as in job_list_older.sql.
SELECT j.id, j.queue, j.kind, j.status, s.state, j.priority, j.attempts, j.max_attempts,
       extract(epoch FROM j.run_at)::float8               AS run_at,
       extract(epoch FROM j.created_at)::float8           AS created_at,
       extract(epoch FROM j.finished_at)::float8          AS finished_at,
       extract(epoch FROM j.locked_until)::float8         AS locked_until,
       left(j.last_error, 200)                            AS last_error,
       j.held,
       extract(epoch FROM now())::float8                  AS now
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
WHERE ($2::int8 IS NULL OR j.id >= $2::int8)
  AND strpos(lower(j.payload::text), lower($1::text)) > 0
ORDER BY j.id DESC
LIMIT $3
