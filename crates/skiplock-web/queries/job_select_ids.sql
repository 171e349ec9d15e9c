-- The ids a bulk action works on: jobs matching the filters ($1 status, $2 queue, $3 kind,
-- each ignored when NULL) whose id is at most $4 (the newest id when the action was
-- confirmed) and at least $6 (no bound when NULL; for a filter no index serves, the end of the
-- scan budget below $4), oldest first, at most $5. The action itself goes through the library's
-- retry, cancel or delete, which lock and re-check each row. Queued jobs are found through
-- their two partial indexes, and with $7 held jobs only, as in job_list_older.sql; with $8,
-- only jobs in that display state (the same expression as job_list_older.sql's).
SELECT j.id
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
       OR (NOT $7::bool AND j.status = 'queued' AND j.held IS NULL)
       OR (j.held IS NOT NULL AND j.status = 'queued'))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.kind = $3::text)
  AND j.id <= $4::int8
  AND ($6::int8 IS NULL OR j.id >= $6::int8)
  AND ($8::text IS NULL OR s.state = $8::text)
ORDER BY j.id
LIMIT $5
