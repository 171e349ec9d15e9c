-- How long until the next queued job of queue $1 becomes ready, in microseconds by the
-- database's clock (zero or less when one is ready now, NULL when none is queued; not
-- greatest(0, ...), which would turn NULL into 0), and whether the queue is paused (then
-- the wait is NULL: nothing becomes claimable by time alone). A worker asks after a claim
-- came back short, so that it wakes for a scheduled job or a retry even with the fallback
-- poll off, without trusting its own clock, and so that it learns of a pause it was not
-- told of.
SELECT (extract(epoch FROM min(run_at) - now()) * 1000000)::int8 AS wait_us,
       EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND q.paused) AS paused
FROM {schema}.jobs
WHERE queue = $1 AND status = 'queued' AND attempts < max_attempts
  AND NOT EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND q.paused)
