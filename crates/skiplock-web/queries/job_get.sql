-- One job for its page: every column, the payload indented and cut at $2 characters (with
-- its full size), times as epoch seconds, and the database's clock as `now`.
SELECT id, queue, kind, status, priority, attempts, max_attempts,
       extract(epoch FROM run_at)::float8                 AS run_at,
       extract(epoch FROM created_at)::float8             AS created_at,
       extract(epoch FROM finished_at)::float8            AS finished_at,
       extract(epoch FROM locked_until)::float8           AS locked_until,
       last_error,
       left(jsonb_pretty(payload), $2::int4)              AS payload,
       octet_length(payload::text)::int8                  AS payload_bytes,
       extract(epoch FROM now())::float8                  AS now
FROM {schema}.jobs
WHERE id = $1
LIMIT 1
