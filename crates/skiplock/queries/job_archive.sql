-- Like job_prune.sql, but moves the batch to jobs_archive in the same statement.
WITH doomed AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE (status = 'done' OR ($2::bool AND status = 'failed'))
    AND coalesce(finished_at, created_at) < now() - $1::int8 * interval '1 microsecond'
  ORDER BY id
  LIMIT $3
  FOR UPDATE SKIP LOCKED
), moved AS (
  DELETE FROM {schema}.jobs j
  USING doomed
  WHERE j.id = doomed.id
  RETURNING j.*
), archived AS (
  INSERT INTO {schema}.jobs_archive
    (id, queue, payload, status, run_at, attempts, max_attempts, locked_until, last_error,
     created_at, kind, priority, finished_at, schedule, output, after, errors, attempted_at)
  SELECT id, queue, payload, status, run_at, attempts, max_attempts, locked_until, last_error,
         created_at, kind, priority, finished_at, schedule, output, after, errors, attempted_at
  FROM moved
  RETURNING 1
)
SELECT count(*) FROM archived
