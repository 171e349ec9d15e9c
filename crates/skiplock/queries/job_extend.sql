-- Renew a running job's lease (S7). $1 id, $2 attempts from the claim, $3 lease in
-- microseconds from the database's now(). Zero rows: the job is no longer this worker's,
-- so its handler must stop and its result must not be written.
UPDATE {schema}.jobs
SET locked_until = now() + $3::int8 * interval '1 microsecond'
WHERE id = $1
  AND status = 'running'
  AND attempts = $2
