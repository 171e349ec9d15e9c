-- Retry jobs now: queued, done or failed jobs among $1 go back to `queued`.
-- `attempts` is never lowered (it fences stale workers); `max_attempts` is raised when
-- needed so that the job gets at least one more attempt. Running jobs are left alone.
-- Returns the ids moved, with a NULL `duplicate`.
--
-- Unique keys: a done or failed job with a unique key whose key is held by another active
-- job (or by another job of $1 that would become active with it) would be a second active
-- job with that key. Then nothing at all is moved, and the statement returns each such job
-- with the id of that duplicate instead, so the caller can name it (rather than fail on
-- jobs_unique_idx). One probe of the unique index per keyed job.
--
-- Ready at once, except a job cancelled while it ran: its handler may still hold the lease
-- it had (job_cancel.sql keeps locked_until), so it becomes ready no earlier than that
-- lease's end, and two attempts never overlap. The lease's end stays in locked_until while
-- it is in the future (only the claim writes a new one), so that a second retry, or a
-- unique enqueue that replaces run_at (job_unique_replace.sql, enqueue_unique()), cannot
-- make the job ready before it either.
--
-- Moved jobs send one notification per queue (at commit), so that idle workers, the fallback
-- poll off included, look at once (and learn when a job waiting for an old lease is due).
--
-- Row locking as in job_cancel.sql: one primary-key probe per id, in id order.
WITH o AS MATERIALIZED (
  SELECT DISTINCT id FROM unnest($1::int8[]) AS o(id) ORDER BY id
), t AS MATERIALIZED (
  SELECT l.id, l.status, l.unique_key
  FROM o
  CROSS JOIN LATERAL (
    SELECT j.id, j.status, j.attempts, j.unique_key
    FROM {schema}.jobs j WHERE j.id = o.id FOR UPDATE OF j
  ) l
  WHERE l.status IN ('queued', 'done', 'failed')
    AND l.attempts < 2147483647
), keyed AS MATERIALIZED (
  SELECT id, unique_key, min(id) OVER (PARTITION BY unique_key) AS first_id
  FROM t
  WHERE unique_key IS NOT NULL
    AND status <> 'queued'
), clash AS MATERIALIZED (
  SELECT k.id,
         coalesce((SELECT a.id FROM {schema}.jobs a
                   WHERE a.unique_key = k.unique_key
                     AND a.unique_key IS NOT NULL
                     AND a.status IN ('queued', 'running')
                     AND a.id <> k.id),
                  nullif(k.first_id, k.id)) AS duplicate
  FROM keyed k
), moved AS (
UPDATE {schema}.jobs j
SET status       = 'queued',
    run_at       = greatest(now(), coalesce(j.locked_until, now())),
    max_attempts = greatest(j.max_attempts, j.attempts + 1),
    locked_until = CASE WHEN j.locked_until > now() THEN j.locked_until END,
    finished_at  = NULL
FROM t
WHERE j.id = t.id
  AND NOT EXISTS (SELECT 1 FROM clash WHERE clash.duplicate IS NOT NULL)
RETURNING j.id, j.queue
), woken AS (
  SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM moved) q
)
SELECT id, NULL::int8 AS duplicate FROM moved
WHERE (SELECT count(*) FROM woken) >= 0
UNION ALL
SELECT id, duplicate FROM clash WHERE duplicate IS NOT NULL
