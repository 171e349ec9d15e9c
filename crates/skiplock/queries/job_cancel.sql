-- Cancel jobs: queued or running jobs among $1 become `failed` with last_error
-- 'cancelled'. Returns the ids cancelled.
--
-- A running job keeps its locked_until: its handler may still be running until that lease
-- ends, and job_retry.sql makes a retried job ready no earlier than that, so that two
-- attempts never overlap. For each running job cancelled, a notification 'cancel:<id>' goes
-- to the schema's channel (the insert trigger's; queue names cannot hold ':', so it cannot
-- be mistaken for a queue) when this statement commits, so that its worker can stop the
-- handler at once; its next heartbeat would tell it anyway (the renewal is refused), and its
-- late result is refused by the guard.
--
-- Ids are deduplicated and sorted, and each row is locked with one primary-key probe in id
-- order (a LATERAL subquery: the input is never rescanned per row, whatever the statistics
-- say); the status test runs on the locked, latest row version.
WITH o AS MATERIALIZED (
  SELECT DISTINCT id FROM unnest($1::int8[]) AS o(id) ORDER BY id
), t AS MATERIALIZED (
  SELECT l.id, l.status
  FROM o
  CROSS JOIN LATERAL (
    SELECT j.id, j.status FROM {schema}.jobs j WHERE j.id = o.id FOR UPDATE OF j
  ) l
  WHERE l.status IN ('queued', 'running')
), cancelled AS (
  UPDATE {schema}.jobs j
  SET status       = 'failed',
      finished_at  = now(),
      last_error   = 'cancelled'
  FROM t
  WHERE j.id = t.id
  RETURNING j.id, t.status AS was
)
SELECT id,
       CASE WHEN was = 'running'
            THEN pg_notify({channel}, 'cancel:' || id)::text END AS notified
FROM cancelled
