-- One job for its page: every column, the payload indented and cut at $2 characters (with
-- its full size), times as epoch seconds, and the database's clock as `now`. For a held job
-- (waiting for its turn in its sequence, migration 11), the member of the sequence it waits
-- for: the active one (queued and not held, or running), by one probe of jobs_sequence_idx;
-- NULL for a job that is not held, or when no member is active.
-- Of a workflow (migration 13): its output indented and cut at $2 characters (with its full
-- size), how many jobs it waits for and how many of those are not done yet, and whether any
-- job waits for it (the page reads its family and its graph only then).
-- `attempted_at`: when its current or last attempt started (migration 14).
-- `state` is the display state, by the same expression as job_list_older.sql's (the
-- library's jobs_list.sql).
SELECT j.id, j.queue, j.kind, j.status, s.state, j.priority, j.attempts, j.max_attempts,
       extract(epoch FROM j.run_at)::float8               AS run_at,
       extract(epoch FROM j.created_at)::float8           AS created_at,
       extract(epoch FROM j.finished_at)::float8          AS finished_at,
       extract(epoch FROM j.locked_until)::float8         AS locked_until,
       extract(epoch FROM j.attempted_at)::float8         AS attempted_at,
       j.last_error,
       left(jsonb_pretty(j.payload), $2::int4)            AS payload,
       octet_length(j.payload::text)::int8                AS payload_bytes,
       j.key, j.sequence, j.held,
       left(jsonb_pretty(j.output), $2::int4)             AS output,
       octet_length(j.output::text)::int8                 AS output_bytes,
       coalesce(cardinality(j.after), 0)::int8            AS parents_total,
       j.waiting,
       coalesce(j.has_children, false)                    AS has_children,
       a.id                                               AS waits_for,
       a.status                                           AS waits_for_status,
       extract(epoch FROM now())::float8                  AS now
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
LEFT JOIN LATERAL (
  SELECT s.id, s.status FROM {schema}.jobs s
  WHERE j.held IS NOT NULL AND j.status = 'queued'
    AND s.sequence = j.sequence AND s.held IS NULL AND s.status IN ('queued', 'running')
  ORDER BY s.id
  LIMIT 1
) a ON true
WHERE j.id = $1
LIMIT 1
