-- Delete one batch of finished jobs: `done` ones, and `failed` ones when $2, finished
-- more than $1 microseconds ago (by the database's clock). $3 is the batch size (at most
-- 10,000), so that no statement holds many row locks for long. Returns how many it deleted;
-- the caller repeats until a batch comes back short.
WITH doomed AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE (status = 'done' OR ($2::bool AND status = 'failed'))
    AND coalesce(finished_at, created_at) < now() - $1::int8 * interval '1 microsecond'
  ORDER BY id
  LIMIT $3
  FOR UPDATE SKIP LOCKED
), deleted AS (
  DELETE FROM {schema}.jobs j
  USING doomed
  WHERE j.id = doomed.id
  RETURNING 1
)
SELECT count(*) FROM deleted
