-- Mark a job done (S4). $1 id, $2 the attempts value its claim returned.
--
-- The guard `status = 'running' AND attempts = $2` is checked inside the UPDATE, so it is
-- re-evaluated on the latest row version. Zero rows means the job is no longer this
-- worker's (its lease expired, the reaper re-queued it, another worker claimed it):
-- the caller must not count it as done.
UPDATE {schema}.jobs
SET status       = 'done',
    locked_until = NULL,
    finished_at  = now()
WHERE id = $1
  AND status = 'running'
  AND attempts = $2
