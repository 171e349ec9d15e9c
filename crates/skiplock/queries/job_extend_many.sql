-- Renew the leases of all of one worker's running jobs in one statement (the heartbeat).
-- $1 ids, $2 the attempts each claim returned, $3 lease in microseconds from now().
-- Same guard as job_extend.sql, rows locked in id order (see job_finish_many.sql).
-- Returns the ids renewed; a job missing from the result is no longer this worker's, and
-- its handler is told to stop.
WITH o AS (
  SELECT * FROM unnest($1::int8[], $2::int4[]) AS o(id, attempt)
), locked AS (
  SELECT j.id
  FROM {schema}.jobs j
  JOIN o ON o.id = j.id
  WHERE j.status = 'running' AND j.attempts = o.attempt
  ORDER BY j.id
  FOR UPDATE OF j
)
UPDATE {schema}.jobs j
SET locked_until = now() + $3::int8 * interval '1 microsecond'
FROM o
JOIN locked ON locked.id = o.id
WHERE j.id = o.id
  AND j.status = 'running'
  AND j.attempts = o.attempt
RETURNING j.id
