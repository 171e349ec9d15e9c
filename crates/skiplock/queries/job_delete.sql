-- Delete jobs among $1 that are not running (cancel a running job first).
-- Returns the ids deleted. Row locking as in job_cancel.sql: one primary-key probe per id,
-- in id order.
WITH o AS MATERIALIZED (
  SELECT DISTINCT id FROM unnest($1::int8[]) AS o(id) ORDER BY id
), t AS MATERIALIZED (
  SELECT l.id
  FROM o
  CROSS JOIN LATERAL (
    SELECT j.id, j.status FROM {schema}.jobs j WHERE j.id = o.id FOR UPDATE OF j
  ) l
  WHERE l.status <> 'running'
)
DELETE FROM {schema}.jobs j
USING t
WHERE j.id = t.id
RETURNING j.id
