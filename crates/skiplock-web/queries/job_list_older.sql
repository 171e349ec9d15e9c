-- One page of the job list, newest first: jobs with an id below $4 (no bound when NULL) and
-- at least $6 (no bound when NULL), matching the filters $1 status, $2 queue, $3 kind (each
-- ignored when NULL), at most $5. For a filter no index serves, $6 is the end of the scan
-- budget (job_scan_older.sql), so that the statement reads a bounded range of the primary key
-- however rare the matches are.
-- Keyset pagination: the next page starts below the last id shown, so a page costs the same
-- however deep it is (no OFFSET). Times are epoch seconds; `now` is the database's clock.
--
-- Queued jobs are found through their two partial indexes (migration 11): jobs_ready_idx for
-- those that are not held, the held rows' index for held ones (waiting for their turn in a
-- sequence). The OR below says so to the planner, which uses a partial index only for a
-- condition that implies its predicate; `status = 'queued'` alone no longer does. With $7,
-- held jobs only (the list's "held" state). `held` says why a queued job waits, if it is held.
-- The display state (`state`) is the library's, by the same expression as its jobs_list.sql
-- (`skiplock jobs`): queued jobs are waiting (held), retrying, scheduled or available, and a
-- failed job with last_error 'cancelled' is cancelled. With $8, only jobs in that display
-- state (the stored status $1 and $7 still pick the index).
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
WHERE ($1::text IS NULL OR j.status = $1::text)
  AND ($1::text IS DISTINCT FROM 'queued'
       OR (NOT $7::bool AND j.status = 'queued' AND j.held IS NULL)
       OR (j.held IS NOT NULL AND j.status = 'queued'))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.kind = $3::text)
  AND ($4::int8 IS NULL OR j.id < $4::int8)
  AND ($6::int8 IS NULL OR j.id >= $6::int8)
  AND ($8::text IS NULL OR s.state = $8::text)
ORDER BY j.id DESC
LIMIT $5
