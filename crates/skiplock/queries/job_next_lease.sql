-- How long until the earliest lease of a running job ends, in microseconds by the database's
-- clock (zero or less when one has ended already, NULL when no job is running). The reaper
-- asks after each round, so that a worker whose fallback poll is off, idle and told of
-- nothing, still wakes to reap a lease that a dead worker left behind: it cannot learn of
-- that lease otherwise. One probe of the partial lease index (jobs_lease_idx) in its order,
-- LIMIT 1, whatever the statistics say (min() lets a planner that believes no job runs read
-- the whole index instead).
SELECT (extract(epoch FROM (SELECT locked_until
                            FROM {schema}.jobs
                            WHERE status = 'running'
                            ORDER BY locked_until
                            LIMIT 1) - now()) * 1000000)::int8 AS wait_us
