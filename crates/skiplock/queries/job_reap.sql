-- One reaper round, run by the worker's reaper and by Client::reap alike:
--   * jobs whose lease expired go back to `queued`, or to `failed` once they used all their
--     attempts (a job that kills every worker that runs it must not come back forever);
--     an earlier error is kept, otherwise the reason is 'lease expired';
--     the attempt is appended to the job's history (`errors`, the last 20, as
--     job_finish_many.sql does) with the error 'lease expired';
--   * queued jobs with no attempt left (attempts >= max_attempts: the claim would skip them
--     forever) become `failed` with 'no attempts left' unless they have an error already.
-- $1 is the most rows of each kind one round moves; the caller repeats while a round comes
-- back full.
--
-- Rows are picked in id order with FOR UPDATE SKIP LOCKED: one row another session holds
-- (a worker writing that job's outcome, an operator's open transaction) is left for a later
-- round instead of making the whole round wait and fail on lock_timeout, and the id order
-- matches the batched outcome and heartbeat statements. FOR UPDATE re-checks the WHERE on
-- the latest row version, so a job completed concurrently is left alone; the UPDATE then
-- joins only on id (no filter of its own that stale statistics could make look selective).
-- Jobs it returns to `queued` send one notification per queue (at commit), so that idle
-- workers of any process, the fallback poll off included, pick them up at once.
WITH expired AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE status = 'running'
    AND locked_until < now()
  ORDER BY id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), exhausted AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE status = 'queued'
    AND attempts >= max_attempts
  ORDER BY id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), doomed AS MATERIALIZED (
  SELECT id FROM expired
  UNION ALL
  SELECT id FROM exhausted
), reaped AS (
UPDATE {schema}.jobs j
SET status       = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
    finished_at  = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    locked_until = NULL,
    last_error   = coalesce(j.last_error,
                            CASE WHEN j.status = 'queued' THEN 'no attempts left'
                                 ELSE 'lease expired' END),
    errors       = CASE WHEN j.status = 'running' THEN
                     jsonb_path_query_array(coalesce(j.errors, '[]') || jsonb_build_array(
                       jsonb_build_object('attempt', j.attempts, 'at', now(),
                                          'error', 'lease expired',
                                          'ran_ms', (extract(epoch FROM now() - j.attempted_at)
                                                     * 1000)::int8)),
                       '$[last - 19 to last]')
                   ELSE j.errors END
FROM doomed d
WHERE j.id = d.id
RETURNING j.id, j.status, j.attempts, j.queue
), bound AS MATERIALIZED (
  -- A limited queue waiting for a slot learns that one freed (see job_finish_many.sql).
  SELECT q.name, q.limit_bound
  FROM {schema}.queues q
  WHERE q.name IN (SELECT DISTINCT queue FROM reaped) AND q.limited
), woken AS (
  SELECT pg_notify({channel}, q.queue)
  FROM (SELECT queue FROM reaped WHERE status = 'queued'
        UNION
        SELECT name FROM bound WHERE limit_bound = 'slots') q
)
-- Referencing `woken` makes it run (a plain SELECT in WITH runs only when read).
SELECT id, status, attempts
FROM reaped
WHERE (SELECT count(*) FROM woken) >= 0
