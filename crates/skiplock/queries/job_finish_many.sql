-- Write the outcomes of many jobs in one statement (the worker's batched completer).
--
-- $1 ids, $2 the attempts each claim returned, $3 outcomes, $4 error messages, $5 requeue
-- delays (microseconds), $6 backoff bases and $7 backoff caps (microseconds); one array
-- element per job. Outcomes:
--   done     the job succeeded                     -> done
--   retry    a retryable error                     -> queued after least(cap, base * 2^attempts),
--                                                     or failed once attempts >= max_attempts
--   discard  a permanent error                     -> failed now
--   requeue  snoozed, or handed back at shutdown   -> queued after the delay, with max_attempts
--                                                     raised by one so that it costs no attempt
--                                                     (attempts never goes down: it is the
--                                                     fencing token)
--
-- Each row keeps the guard of job_complete.sql (running, same attempts). Rows are locked in
-- id order first, so that two such statements (or the batched heartbeat) never deadlock
-- each other. Returns the rows written; a job missing from the result was no longer this
-- worker's.
WITH o AS (
  SELECT *
  FROM unnest($1::int8[], $2::int4[], $3::text[], $4::text[], $5::int8[], $6::int8[], $7::int8[])
       AS o(id, attempt, outcome, error, delay_us, base_us, cap_us)
), locked AS (
  SELECT j.id
  FROM {schema}.jobs j
  JOIN o ON o.id = j.id
  WHERE j.status = 'running' AND j.attempts = o.attempt
  ORDER BY j.id
  FOR UPDATE OF j
)
UPDATE {schema}.jobs j
SET status       = CASE
                     WHEN o.outcome = 'done' THEN 'done'
                     WHEN o.outcome = 'discard' THEN 'failed'
                     WHEN o.outcome = 'requeue' THEN 'queued'
                     WHEN j.attempts >= j.max_attempts THEN 'failed'
                     ELSE 'queued'
                   END,
    run_at       = CASE
                     WHEN o.outcome = 'requeue'
                       THEN now() + o.delay_us * interval '1 microsecond'
                     WHEN o.outcome = 'retry' AND j.attempts < j.max_attempts
                       THEN now() + least(o.cap_us::float8,
                                          o.base_us::float8 * 2 ^ least(j.attempts, 60))
                                    * interval '1 microsecond'
                     ELSE j.run_at
                   END,
    max_attempts = CASE WHEN o.outcome = 'requeue'
                        THEN least(j.max_attempts, 2147483646) + 1
                        ELSE j.max_attempts END,
    finished_at  = CASE
                     WHEN o.outcome IN ('done', 'discard') THEN now()
                     WHEN o.outcome = 'retry' AND j.attempts >= j.max_attempts THEN now()
                   END,
    locked_until = NULL,
    last_error   = CASE WHEN o.outcome IN ('retry', 'discard') THEN o.error
                        ELSE j.last_error END
FROM o
JOIN locked ON locked.id = o.id
WHERE j.id = o.id
  AND j.status = 'running'
  AND j.attempts = o.attempt
RETURNING j.id, j.status, j.run_at
