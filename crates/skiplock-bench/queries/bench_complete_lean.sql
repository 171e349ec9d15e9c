-- The leanest fenced completion of a claimed batch: one UPDATE, each row still running at
-- the attempt its claim returned. pgbench runs it after the worker's claim for the ceiling
-- (`skiplock bench throughput`); the worker itself writes job_complete_many.sql, which
-- also locks in id order and answers row by row.
--
-- $1 ids, $2 the attempts the claim returned.
UPDATE {schema}.jobs j
SET status = 'done', finished_at = now(), locked_until = NULL
FROM unnest($1::int8[], $2::int4[]) AS d(id, attempt)
WHERE j.id = d.id
  AND j.status = 'running'
  AND j.attempts = d.attempt
