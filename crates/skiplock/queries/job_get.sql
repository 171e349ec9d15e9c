-- One job by id, every column (payload as JSON text).
SELECT id, queue, kind, payload::text AS payload, status, priority, run_at, attempts,
       max_attempts, locked_until, last_error, created_at, finished_at, attempted_at, schedule,
       key, sequence, held, output::text AS output, after, waiting,
       unique_key, unique_queued_only, has_children,
       errors::text AS errors
FROM {schema}.jobs
WHERE id = $1
