-- Renew the leases of many running jobs in one statement: the worker's heartbeat (its
-- running jobs and those whose outcome is still being written), and Client::extend with a
-- batch of one. $1 ids, $2 the attempts each claim returned, $3 lease in microseconds from
-- now().
--
-- Built like job_finish_many.sql (read its notes): one primary-key probe per element, in id
-- order, SKIP LOCKED, the guard checked on the locked row. Returns one row per input
-- element: n (its 1-based position) and result: renewed, lost (no longer this claim's: its
-- handler is told to stop) or busy (another session holds the row locked; try again soon).
WITH o AS MATERIALIZED (
  SELECT *
  FROM unnest($1::int8[], $2::int4[]) WITH ORDINALITY AS o(id, attempt, n)
  ORDER BY id, n
), c AS MATERIALIZED (
  SELECT o.*,
         CASE
           WHEN l.id IS NOT NULL THEN
             CASE WHEN l.status = 'running'
                       AND l.attempts = o.attempt -- fence
                  THEN 'write' ELSE 'lost' END
           WHEN (SELECT x.status = 'running'
                        AND x.attempts = o.attempt -- fence
                 FROM {schema}.jobs x WHERE x.id = o.id) THEN 'busy'
           ELSE 'lost'
         END AS verdict
  FROM o
  LEFT JOIN LATERAL (
    SELECT j.id, j.status, j.attempts
    FROM {schema}.jobs j
    WHERE j.id = o.id
    FOR UPDATE OF j SKIP LOCKED
  ) l ON true
), renewed AS (
  UPDATE {schema}.jobs j
  SET locked_until = now() + $3::int8 * interval '1 microsecond'
  FROM c
  WHERE c.verdict = 'write'
    AND j.id = c.id
  RETURNING c.n
)
SELECT n, 'renewed' AS result FROM renewed
UNION ALL
SELECT n, verdict FROM c WHERE verdict <> 'write'
