-- Record a failed attempt (S5). $1 id, $2 attempts from the claim, $3 error message,
-- $4 true for a permanent failure (no retry), $5 backoff base and $6 backoff cap in
-- microseconds.
--
-- Retries wait least(cap, base * 2^attempts): with the defaults (10 s, 1 hour) that is
-- 20 s, 40 s, 80 s, 160 s after attempts 1-4. The exponent is bounded so that a large
-- attempts value cannot overflow the interval. At max_attempts the job is `failed`.
-- Same guard as job_complete.sql: zero rows means the job is no longer this worker's.
UPDATE {schema}.jobs
SET status       = CASE WHEN $4::bool OR attempts >= max_attempts
                        THEN 'failed' ELSE 'queued' END,
    run_at       = CASE WHEN $4::bool OR attempts >= max_attempts
                        THEN run_at
                        ELSE now() + least($6::int8::float8,
                                           $5::int8::float8 * 2 ^ least(attempts, 60))
                                     * interval '1 microsecond' END,
    finished_at  = CASE WHEN $4::bool OR attempts >= max_attempts
                        THEN now() END,
    locked_until = NULL,
    last_error   = $3
WHERE id = $1
  AND status = 'running'
  AND attempts = $2
RETURNING status, run_at,
          (extract(epoch FROM run_at - now()) * 1000000)::int8 AS retry_in_us
