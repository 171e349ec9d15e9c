-- Retry jobs now (B5): queued, done or failed jobs among $1 go back to `queued`, ready at
-- once. `attempts` is never lowered (it fences stale workers); `max_attempts` is raised when
-- needed so that the job gets at least one more attempt. Running jobs are left alone.
-- Returns the ids moved.
UPDATE {schema}.jobs
SET status       = 'queued',
    run_at       = now(),
    max_attempts = greatest(max_attempts, attempts + 1),
    locked_until = NULL,
    finished_at  = NULL
WHERE id = ANY($1::int8[])
  AND status IN ('queued', 'done', 'failed')
  AND attempts < 2147483647
RETURNING id
