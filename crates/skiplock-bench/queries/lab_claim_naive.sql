-- THE WRONG CLAIM, kept only for `skiplock lab` and the tests that prove the harness can see
-- double runs. Never used by the queue.
--
-- The subquery picks the oldest queued job without locking it. A second session running the
-- same statement concurrently waits on the first one's row lock; under READ COMMITTED it then
-- re-checks only `id = <that id>` on the new row version, which still matches, so it takes
-- the job again. Like the article's naive.sql, the claim marks the job done at once.
-- $1 queue, $2 how many jobs.
UPDATE {schema}.jobs
SET status = 'done', attempts = attempts + 1, finished_at = now()
WHERE id IN (
  SELECT id FROM {schema}.jobs
  WHERE queue = $1 AND status = 'queued'
  ORDER BY run_at
  LIMIT $2
)
RETURNING id, attempts
