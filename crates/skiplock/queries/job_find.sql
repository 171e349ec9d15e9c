-- The jobs in the states $4 whose kind is $1, queue $2 and payload contains $3 (a JSON
-- object or value: `@>`, so every field given must be present with an equal value; other
-- fields may differ), each filter skipped when NULL; at most $5 rows, oldest first. For
-- `skiplock::testing`'s assertions, and with every filter NULL, the listing of what was
-- there when one fails.
--
-- Times come back as microseconds since the epoch, so that both the tokio-postgres path and
-- the sqlx path (built without a date-time feature) read them the same way.
SELECT id, queue, kind, payload::text AS payload, status, priority,
       floor(extract(epoch FROM run_at) * 1000000)::int8 AS run_at_us,
       attempts, max_attempts,
       floor(extract(epoch FROM locked_until) * 1000000)::int8 AS locked_until_us,
       last_error,
       floor(extract(epoch FROM created_at) * 1000000)::int8 AS created_at_us,
       floor(extract(epoch FROM finished_at) * 1000000)::int8 AS finished_at_us,
       floor(extract(epoch FROM attempted_at) * 1000000)::int8 AS attempted_at_us,
       schedule, key, sequence, held, output::text AS output, after, waiting,
       unique_key, unique_queued_only, has_children,
       errors::text AS errors
FROM {schema}.jobs
WHERE status = ANY ($4::text[])
  AND ($1::text IS NULL OR kind = $1::text)
  AND ($2::text IS NULL OR queue = $2::text)
  AND ($3::text IS NULL OR payload @> $3::jsonb)
ORDER BY id
LIMIT $5
