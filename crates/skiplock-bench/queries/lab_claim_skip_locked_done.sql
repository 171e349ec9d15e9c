-- The article's final claim, marking the job done at once as its pgbench experiment did
-- (claim = complete, one row version per job). Kept for `skiplock lab vacuum`, whose dead-row
-- counts are then comparable with the article's. $1 queue, $2 how many jobs.
WITH next AS (
  SELECT id FROM {schema}.jobs
  WHERE queue = $1 AND status = 'queued' AND run_at <= now()
  ORDER BY run_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs j
SET status = 'done', attempts = j.attempts + 1, finished_at = now()
FROM next
WHERE j.id = next.id
RETURNING j.id, j.attempts
