-- Claim job $1, if it is queued and has an attempt left, and lease it for $2 microseconds:
-- `skiplock::testing::run_job`. The same SET list as job_claim.sql (attempts + 1 as the
-- fencing token, the lease, the unique key given up as the job starts), but neither the
-- job's run_at nor a pause of its queue holds it back: a test runs the job it names, now.
-- SKIP LOCKED: a row another session holds is not waited for; nothing is claimed. A held
-- job (waiting for its turn in a sequence) is run too, and is no longer held; a job waiting
-- for other jobs (`held = 'after'`) is not: running it would break the order it was given.
WITH next AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE id = $1
    AND status = 'queued'
    AND attempts < max_attempts
    AND held IS DISTINCT FROM 'after'
  FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs j
SET status       = 'running',
    attempts     = j.attempts + 1,
    locked_until = now() + $2::int8 * interval '1 microsecond',
    attempted_at = now(),
    unique_key   = CASE WHEN j.unique_queued_only THEN NULL ELSE j.unique_key END,
    held         = NULL
FROM next
WHERE j.id = next.id
RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.priority, j.run_at, j.created_at, j.locked_until
