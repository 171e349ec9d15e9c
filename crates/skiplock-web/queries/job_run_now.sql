-- Run now: job $1 becomes due at once, if it is still queued, never ran (attempts = 0) and is
-- due later (run_at in the future: enqueued for later, or by a schedule ahead of its time).
-- One primary-key probe. A worker that claimed it meanwhile is not disturbed: the UPDATE
-- waits for the claim's row lock, then sees `running` and leaves the row alone; a job that
-- ran (a retry waiting for its backoff) keeps its backoff. Only run_at changes, so a held job
-- (waiting for its parents or its turn in a sequence) stays held.
--
-- A moved job wakes the workers of its queue ($2: the schema's notification channel, the one
-- an insert notifies), so that idle workers, the poll off included, look at once. Returns the
-- id when it moved.
WITH moved AS (
  UPDATE {schema}.jobs j
  SET run_at = now()
  WHERE j.id = $1::int8
    AND j.status = 'queued'
    AND j.attempts = 0
    AND j.run_at > now()
  RETURNING j.id, j.queue
), woken AS (
  SELECT pg_notify($2::text, m.queue) FROM moved m
)
SELECT id FROM moved
WHERE (SELECT count(*) FROM woken) >= 0
LIMIT 1
