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
  AND ($4::int8 IS NULL OR id < $4::int8)
  AND ($6::int8 IS NULL OR id >= $6::int8)
ORDER BY id DESC
LIMIT $5
