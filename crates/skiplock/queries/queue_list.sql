-- Every queue that has a row in `queues` (it was paused once) or queued or running jobs,
-- with its pause and its queued, ready and running jobs. Times are microseconds since the
-- epoch, by the database's clock.
--
-- The counts read only queued and running rows, each kind through its partial index
-- (jobs_ready_idx, jobs_lease_idx), never the finished history: cheap while the backlog is,
-- whatever the table keeps. Two branches, not `status IN (...)`: the planner scans a partial
-- index only for a condition that implies its predicate.
WITH live AS (
  SELECT queue, status, run_at, attempts, max_attempts
  FROM {schema}.jobs WHERE status = 'queued'
  UNION ALL
  SELECT queue, status, run_at, attempts, max_attempts
  FROM {schema}.jobs WHERE status = 'running'
), counts AS (
  SELECT queue,
         count(*) FILTER (WHERE status = 'queued')                         AS queued,
         count(*) FILTER (WHERE status = 'queued' AND run_at <= now()
                          AND attempts < max_attempts)                     AS ready,
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
       coalesce(c.running, 0)                                     AS running
FROM {schema}.queues q
FULL JOIN counts c ON c.queue = q.name
ORDER BY 1
