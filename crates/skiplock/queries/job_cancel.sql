-- Cancel jobs (B5): queued or running jobs among $1 become `failed` with last_error
-- 'cancelled'. A running job's worker finds out at its next heartbeat (its handler is told to
-- stop) and its late result is refused by the attempts guard. Returns the ids cancelled.
UPDATE {schema}.jobs
SET status       = 'failed',
    locked_until = NULL,
    finished_at  = now(),
    last_error   = 'cancelled'
WHERE id = ANY($1::int8[])
  AND status IN ('queued', 'running')
RETURNING id
