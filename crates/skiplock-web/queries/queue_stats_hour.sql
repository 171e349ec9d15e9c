-- The last hour of queue $1's per-minute rollup (migration 14's queue_stats, written by a
-- worker's elected gauges service): per minute (epoch seconds), the jobs that reached done
-- and failed in it, and the available, scheduled and running jobs at its last sample. A
-- minute with no sample has no row. One range of the primary key (queue, minute): 60 rows
-- at most.
SELECT extract(epoch FROM minute)::float8 AS minute,
       done, failed, available, scheduled, running,
       extract(epoch FROM now())::float8  AS now
FROM {schema}.queue_stats
WHERE queue = $1::text
  AND minute > now() - interval '1 hour'
ORDER BY minute
LIMIT 60
