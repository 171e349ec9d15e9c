-- Retry jobs now: queued, done or failed jobs among $1 go back to `queued`.
-- `attempts` is never lowered (it fences stale workers); `max_attempts` is raised when
-- needed so that the job gets at least one more attempt. Running jobs are left alone.
-- Returns the ids moved.
--
-- Ready at once, except a job cancelled while it ran: its handler may still hold the lease
-- it had (job_cancel.sql keeps locked_until), so it becomes ready no earlier than that
-- lease's end, and two attempts never overlap.
--
-- Moved jobs send one notification per queue (at commit), so that idle workers, the fallback
-- poll off included, look at once (and learn when a job waiting for an old lease is due).
--
-- Row locking as in job_cancel.sql: one primary-key probe per id, in id order.
WITH o AS MATERIALIZED (
  SELECT DISTINCT id FROM unnest($1::int8[]) AS o(id) ORDER BY id
), t AS MATERIALIZED (
  SELECT l.id
  FROM o
  CROSS JOIN LATERAL (
    SELECT j.id, j.status, j.attempts FROM {schema}.jobs j WHERE j.id = o.id FOR UPDATE OF j
  ) l
  WHERE l.status IN ('queued', 'done', 'failed')
    AND l.attempts < 2147483647
), moved AS (
UPDATE {schema}.jobs j
SET status       = 'queued',
    run_at       = greatest(now(), coalesce(j.locked_until, now())),
    max_attempts = greatest(j.max_attempts, j.attempts + 1),
    locked_until = NULL,
    finished_at  = NULL
FROM t
WHERE j.id = t.id
RETURNING j.id, j.queue
), woken AS (
  SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM moved) q
)
SELECT id FROM moved
WHERE (SELECT count(*) FROM woken) >= 0
