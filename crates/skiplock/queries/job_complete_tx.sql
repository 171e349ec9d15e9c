-- Complete job $1 inside the caller's own transaction, guarded by its claim's attempt $2:
-- `JobContext::complete_tx`. $3 is the output (JSON text, NULL for none).
--
-- The same guard as job_finish_many.sql (running, same attempt), and the same columns as its
-- `complete` outcome, but the row lock is waited for instead of skipped: in the caller's
-- transaction a moment's wait for the heartbeat or the reaper is right, and then the guard
-- is checked on the latest row version. No row back means the job is no longer this claim's
-- (its lease expired and another attempt started, or it was cancelled): the caller's
-- transaction must roll back, and its writes with it. The job becomes done, and the jobs
-- waiting for it ready (migration 13's trigger), only if that transaction commits.
UPDATE {schema}.jobs j
SET status       = 'done',
    finished_at  = now(),
    locked_until = NULL,
    output       = $3::text::jsonb
WHERE j.id = $1
  AND j.status = 'running'
  AND j.attempts = $2 -- fence
RETURNING j.id
