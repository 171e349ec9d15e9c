-- Every queue that has a row in `queues` (it was paused or limited once) or queued or running
-- jobs, with its pause, its limits and its queued, ready, held and running jobs. Times are
-- microseconds since the epoch, by the database's clock.
--
-- The counts read only queued and running rows, each kind through its partial index
-- (jobs_ready_idx, jobs_held_idx, jobs_lease_idx and, for running rows without a lease, which
-- only a hand-written UPDATE makes, jobs_leaseless_idx), never the finished history: cheap while
-- the backlog is, whatever the table keeps. Separate branches, not `status IN (...)`: the
-- planner scans a partial index only for a condition that implies its predicate. `queued`
-- counts held jobs too (waiting for their turn in a sequence); `held` counts them alone.
-- `bound` says why the last claim of a limited queue left ready jobs behind ('slots': a
-- full concurrency or per-key limit; 'rate': a full rate window), NULL when it did not.
WITH live AS (
  SELECT queue, status, run_at, attempts, max_attempts, false AS held
  FROM {schema}.jobs WHERE status = 'queued' AND held IS NULL
  UNION ALL
  SELECT queue, status, run_at, attempts, max_attempts, true AS held
  FROM {schema}.jobs WHERE held IS NOT NULL AND status = 'queued'
  UNION ALL
  SELECT queue, status, run_at, attempts, max_attempts, false AS held
  FROM {schema}.jobs WHERE status = 'running' AND locked_until IS NOT NULL
  UNION ALL
  SELECT queue, status, run_at, attempts, max_attempts, false AS held
  FROM {schema}.jobs WHERE status = 'running' AND locked_until IS NULL
), counts AS (
  SELECT queue,
         count(*) FILTER (WHERE status = 'queued')                         AS queued,
         count(*) FILTER (WHERE status = 'queued' AND NOT held AND run_at <= now()
                          AND attempts < max_attempts)                     AS ready,
         count(*) FILTER (WHERE held)                                      AS held,
         count(*) FILTER (WHERE status = 'running')                        AS running
  FROM live
  GROUP BY queue
)
SELECT coalesce(q.name, c.queue)                                  AS name,
       coalesce(q.paused, false)                                  AS paused,
       (extract(epoch FROM q.paused_at) * 1000000)::int8           AS paused_at_us,
       q.paused_by,
       (extract(epoch FROM q.updated_at) * 1000000)::int8          AS updated_at_us,
       coalesce(c.queued, 0)                                      AS queued,
       coalesce(c.ready, 0)                                       AS ready,
       coalesce(c.held, 0)                                        AS held,
       coalesce(c.running, 0)                                     AS running,
       q.concurrency,
       q.per_key,
       q.rate_limit,
       q.rate_period_us,
       q.limit_bound                                              AS bound,
       q.limits_by
FROM {schema}.queues q
FULL JOIN counts c ON c.queue = q.name
ORDER BY 1
