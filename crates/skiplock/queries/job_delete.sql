-- Delete jobs (B5) among $1 that are not running (cancel a running job first).
-- Returns the ids deleted.
DELETE FROM {schema}.jobs
WHERE id = ANY($1::int8[])
  AND status <> 'running'
RETURNING id
