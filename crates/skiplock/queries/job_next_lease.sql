-- How long until the earliest lease of a running job ends, in microseconds by the database's
-- clock (zero or less when one has ended already, NULL when no job is running). The reaper
-- asks after each round, so that a worker whose fallback poll is off, idle and told of
-- nothing, still wakes to reap a lease that a dead worker left behind: it cannot learn of
-- that lease otherwise.
--
-- The lease index (jobs_lease_idx, migration 18) is led by the queue: each queue's leases are
-- in order, and the earliest of all is the least of each queue's first. So this walks the
-- index from queue to queue, one descent each (a recursive CTE: the first running job of the
-- first queue, then of the first queue after it, and so on), whatever the statistics say:
-- as many descents as queues with running jobs, never the running jobs themselves.
WITH RECURSIVE firsts(queue, lease) AS (
  (SELECT j.queue, j.locked_until
   FROM {schema}.jobs j
   WHERE j.status = 'running' AND j.locked_until IS NOT NULL
   ORDER BY j.queue, j.locked_until
   LIMIT 1)
  UNION ALL
  SELECT n.queue, n.locked_until
  FROM firsts f
  CROSS JOIN LATERAL (
    SELECT j.queue, j.locked_until
    FROM {schema}.jobs j
    WHERE j.status = 'running' AND j.locked_until IS NOT NULL AND j.queue > f.queue
    ORDER BY j.queue, j.locked_until
    LIMIT 1
  ) n
)
SELECT (extract(epoch FROM (SELECT min(lease) FROM firsts) - now()) * 1000000)::int8 AS wait_us
