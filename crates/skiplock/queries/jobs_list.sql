-- The jobs matching some filters, newest first: `skiplock jobs`. Each filter is a bound
-- parameter, skipped when NULL:
--   $1  stored statuses (text[]): status = ANY ($1)
--   $2  display states (text[]): the `state` column below = ANY ($2)
--   $3  queue, $4 kind
--   $5  lowest id, $6 highest id (inclusive), $7 the page cursor: ids below it
--   $8  created more than this many microseconds ago (by the database's clock)
--   $9  created less than this many microseconds ago
--   $10 at most this many rows (the caller bounds it)
-- The display state refines `queued`: waiting (held: for its parents, `after`, or for its
-- turn in a sequence, `sequence`), retrying (back after a failed attempt: attempts > 0 and
-- a last_error), scheduled (run_at in the future), available (ready now), in that order of
-- precedence; and `failed` with last_error 'cancelled' is cancelled.
-- ORDER BY id DESC LIMIT with `id < $7`: a backward scan of the primary key that stops
-- after $10 matches.
SELECT j.id, j.queue, j.kind, j.payload::text AS payload, j.status, s.state, j.priority,
       j.run_at, j.attempts, j.max_attempts, j.locked_until, j.last_error, j.created_at,
       j.finished_at, j.schedule, j.key, j.sequence, j.held, j.output::text AS output,
       j.after, j.waiting, j.has_children, j.unique_key, j.unique_queued_only,
       j.attempted_at, j.errors::text AS errors
FROM {schema}.jobs j
CROSS JOIN LATERAL (
  SELECT CASE
           WHEN j.status = 'queued' AND j.held IS NOT NULL THEN 'waiting'
           WHEN j.status = 'queued' AND j.attempts > 0 AND j.last_error IS NOT NULL
             THEN 'retrying'
           WHEN j.status = 'queued' AND j.run_at > now() THEN 'scheduled'
           WHEN j.status = 'queued' THEN 'available'
           WHEN j.status = 'failed' AND j.last_error = 'cancelled' THEN 'cancelled'
           ELSE j.status
         END AS state
) s
WHERE ($1::text[] IS NULL OR j.status = ANY ($1::text[]))
  AND ($2::text[] IS NULL OR s.state = ANY ($2::text[]))
  AND ($3::text IS NULL OR j.queue = $3::text)
  AND ($4::text IS NULL OR j.kind = $4::text)
  AND ($5::int8 IS NULL OR j.id >= $5::int8)
  AND ($6::int8 IS NULL OR j.id <= $6::int8)
  AND ($7::int8 IS NULL OR j.id < $7::int8)
  AND ($8::int8 IS NULL OR j.created_at < now() - $8::int8 * interval '1 microsecond')
  AND ($9::int8 IS NULL OR j.created_at > now() - $9::int8 * interval '1 microsecond')
ORDER BY j.id DESC
LIMIT $10::int8
