-- How long until the next queued job of queue $1 becomes ready, in microseconds by the
-- database's clock (zero or less when one is ready now, NULL when none is queued; not
-- greatest(0, ...), which would turn NULL into 0). A worker asks after
-- a claim came back short, so that it wakes for a scheduled job or a retry even with the
-- fallback poll off, without trusting its own clock.
SELECT (extract(epoch FROM min(run_at) - now()) * 1000000)::int8
FROM {schema}.jobs
WHERE queue = $1 AND status = 'queued' AND attempts < max_attempts
