-- Per queue: queued jobs (ready now or later, held ones included), of those ready now, held
-- ones (waiting for their turn in a sequence, migration 11), running jobs, and the age of the
-- oldest ready job (seconds, by the database's clock). Only queued and running rows are read,
-- each kind through its partial index (jobs_ready_idx for queued rows that are not held, the
-- held rows' index, jobs_lease_idx and jobs_leaseless_idx for running rows with and without a
-- lease), so the finished rows a table keeps cost nothing here.
-- Separate branches, not one `status = 'queued'`: the planner scans a partial index only for
-- a condition that implies its predicate, and the ready index leaves held rows out. Each
-- branch reads at most $1 rows: when a branch's rows across all queues reach $1, its counts
-- are lower bounds (`queued` - `held` for the first, `held` for the second). At most $2
-- queues.
--
-- A queued job with no attempt left (attempts >= max_attempts) is never claimed, so it is not
-- ready (as in the library's health_queues.sql); nor is a held one. `scheduled` and `retrying`
-- are queued jobs in those display states, as the library's jobs_list.sql derives them
-- (`skiplock jobs`): retrying, back after a failed attempt (attempts > 0 and a last error);
-- scheduled, any other due later.
WITH active AS (
  (SELECT queue, status, run_at, attempts, max_attempts, false AS held,
          attempts > 0 AND last_error IS NOT NULL AS retrying
   FROM {schema}.jobs WHERE status = 'queued' AND held IS NULL LIMIT $1)
  UNION ALL
  (SELECT queue, status, run_at, attempts, max_attempts, true AS held, false
   FROM {schema}.jobs WHERE held IS NOT NULL AND status = 'queued' LIMIT $1)
  UNION ALL
  (SELECT queue, status, run_at, attempts, max_attempts, false AS held, false
   FROM {schema}.jobs WHERE status = 'running' AND locked_until IS NOT NULL LIMIT $1)
  UNION ALL
  (SELECT queue, status, run_at, attempts, max_attempts, false AS held, false
   FROM {schema}.jobs WHERE status = 'running' AND locked_until IS NULL LIMIT $1)
)
SELECT queue,
       count(*) FILTER (WHERE status = 'queued')                              AS queued,
       count(*) FILTER (WHERE status = 'queued' AND NOT held AND run_at <= now()
                        AND attempts < max_attempts)                          AS ready,
       count(*) FILTER (WHERE held)                                           AS held,
       count(*) FILTER (WHERE status = 'queued' AND NOT held AND NOT retrying
                        AND run_at > now())                                   AS scheduled,
       count(*) FILTER (WHERE status = 'queued' AND NOT held AND retrying)    AS retrying,
       count(*) FILTER (WHERE status = 'running')                             AS running,
       coalesce(extract(epoch FROM now() - min(run_at)
                FILTER (WHERE status = 'queued' AND NOT held AND run_at <= now()
                        AND attempts < max_attempts)), 0)::float8             AS oldest_ready_age_s
FROM active
GROUP BY queue
ORDER BY queue
LIMIT $2
