-- How long until the next queued job of queue $1 becomes ready, in microseconds by the
-- database's clock (zero or less when one is ready now, NULL when none is queued; not
-- greatest(0, ...), which would turn NULL into 0), and whether the queue is paused (then
-- the wait is NULL: nothing becomes claimable by time alone). A worker asks after a claim
-- came back short, so that it wakes for a scheduled job or a retry even with the fallback
-- poll off, without trusting its own clock, and so that it learns of a pause it was not
-- told of.
--
-- A limited queue (migration 11) whose last claim left ready jobs behind for want of a slot
-- also answers NULL: the outcome that frees a slot notifies. One whose rate window is full
-- answers the wait until the window's oldest start leaves it (or the next job's, if later).
-- Held jobs (waiting for their turn in a sequence) never become ready by time alone.
-- `bound` is the queue's limit_bound ('slots', 'rate' or NULL; NULL while paused), so that a
-- draining worker waits for a limit rather than taking it for an empty queue.
-- ($2, $3, $4) is where the worker's claims start (see job_claim.sql): only jobs after it.
WITH q AS (
  SELECT coalesce(bool_or(paused), false) AS paused,
         coalesce(bool_or(limit_bound = 'slots'), false) AS slots_bound,
         max(CASE WHEN limit_bound = 'rate' THEN rate_period_us END) AS rate_period_us,
         max(CASE WHEN NOT paused THEN limit_bound END) AS bound
  FROM {schema}.queues WHERE name = $1
), next AS (
  SELECT min(run_at) AS run_at
  FROM {schema}.jobs
  WHERE queue = $1 AND status = 'queued' AND held IS NULL AND attempts < max_attempts
    AND (priority, run_at, id) > ($2::int2, coalesce($3::timestamptz, '-infinity'), $4::int8)
    AND NOT EXISTS (SELECT 1 FROM {schema}.queues p WHERE p.name = $1 AND p.paused)
)
SELECT CASE
         WHEN q.paused OR q.slots_bound THEN NULL
         WHEN q.rate_period_us IS NOT NULL AND next.run_at IS NOT NULL THEN
           (extract(epoch FROM greatest(next.run_at,
              (SELECT min(s.at) FROM {schema}.queue_starts s WHERE s.queue = $1)
                + q.rate_period_us * interval '1 microsecond') - now()) * 1000000)::int8
         ELSE (extract(epoch FROM next.run_at - now()) * 1000000)::int8
       END AS wait_us,
       q.paused,
       q.bound
FROM q, next
