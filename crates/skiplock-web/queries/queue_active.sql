-- Per queue: queued jobs (ready now or later), of those ready now, running jobs, and the age
-- of the oldest ready job (seconds, by the database's clock). Only queued and running rows
-- are read, each through its partial index (jobs_ready_idx, jobs_lease_idx), so the finished
-- rows a table keeps cost nothing here. Each state reads at most $1 rows: when a state's rows
-- across all queues reach $1, its counts are lower bounds. At most $2 queues.
--
-- A queued job with no attempt left (attempts >= max_attempts) is never claimed, so it is not
-- ready (as in the library's health_queues.sql).
WITH active AS (
  (SELECT queue, status, run_at, attempts, max_attempts
   FROM {schema}.jobs WHERE status = 'queued' LIMIT $1)
  UNION ALL
  (SELECT queue, status, run_at, attempts, max_attempts
   FROM {schema}.jobs WHERE status = 'running' LIMIT $1)
)
SELECT queue,
       count(*) FILTER (WHERE status = 'queued')                              AS queued,
       count(*) FILTER (WHERE status = 'queued' AND run_at <= now()
                        AND attempts < max_attempts)                          AS ready,
       count(*) FILTER (WHERE status = 'running')                             AS running,
       coalesce(extract(epoch FROM now() - min(run_at)
                FILTER (WHERE status = 'queued' AND run_at <= now()
                        AND attempts < max_attempts)), 0)::float8             AS oldest_ready_age_s
FROM active
GROUP BY queue
ORDER BY queue
LIMIT $2
