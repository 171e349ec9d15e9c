-- Return jobs whose lease expired (S6) to `queued`, or to `failed` once they used all their
-- attempts (a job that kills every worker that runs it must not come back forever).
-- An earlier error is kept; otherwise the reason is 'lease expired'.
--
-- The guard is inside the UPDATE itself (no select-then-update by id), so a job that
-- completes concurrently is re-checked on its new row version and left alone.
UPDATE {schema}.jobs
SET status       = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END,
    finished_at  = CASE WHEN attempts >= max_attempts THEN now() END,
    locked_until = NULL,
    last_error   = coalesce(last_error, 'lease expired')
WHERE status = 'running'
  AND locked_until < now()
RETURNING id, status, attempts
