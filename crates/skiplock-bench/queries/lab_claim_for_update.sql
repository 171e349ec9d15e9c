-- FOR UPDATE without SKIP LOCKED, kept only for `skiplock lab`: correct (no job is taken
-- twice) but every concurrent claimer queues behind the first one's row lock until that
-- transaction ends. Marks the job done at once, like the article's experiment.
-- $1 queue, $2 how many jobs.
WITH next AS (
  SELECT id FROM {schema}.jobs
  WHERE queue = $1 AND status = 'queued' AND run_at <= now()
  ORDER BY run_at
  LIMIT $2
  FOR UPDATE
)
UPDATE {schema}.jobs j
SET status = 'done', attempts = j.attempts + 1, finished_at = now()
FROM next
WHERE j.id = next.id
RETURNING j.id, j.attempts
