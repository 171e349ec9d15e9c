-- Per queue with finished jobs: its done and failed jobs, and those of each finished in the
-- last minute, each counted up to $1 rows (a count of $1 means "at least $1"; the caller passes
-- one more than it shows exactly). At most $2 queues, by name.
--
-- Everything reads jobs_finished_idx (migration 10): the queues are found by a skip along its
-- first column (one descent per queue, however many rows each has), and each count is a
-- bounded read of one (queue, state) range, or of its last minute, in index order. The ORDER
-- BY in each count keeps the index the cheapest plan even where the statistics are stale or
-- say a queue is large (a sequential scan would have to read every match to sort them), so a
-- count reads at most $1 entries whatever the table holds.
WITH RECURSIVE queues AS (
  (SELECT queue
   FROM {schema}.jobs
   WHERE status IN ('done', 'failed')
   ORDER BY queue
   LIMIT 1)
  UNION ALL
  SELECT (SELECT j.queue
          FROM {schema}.jobs j
          WHERE j.status IN ('done', 'failed') AND j.queue > q.queue
          ORDER BY j.queue
          LIMIT 1)
  FROM queues q
  WHERE q.queue IS NOT NULL
)
SELECT q.queue,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                              WHERE j.queue = q.queue AND j.status = 'done'
                              ORDER BY j.finished_at
                              LIMIT $1) d)                                    AS done,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                              WHERE j.queue = q.queue AND j.status = 'failed'
                              ORDER BY j.finished_at
                              LIMIT $1) f)                                    AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                              WHERE j.queue = q.queue AND j.status = 'done'
                                AND j.finished_at > now() - interval '1 minute'
                              ORDER BY j.finished_at
                              LIMIT $1) d)                                    AS done_last_minute,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                              WHERE j.queue = q.queue AND j.status = 'failed'
                                AND j.finished_at > now() - interval '1 minute'
                              ORDER BY j.finished_at
                              LIMIT $1) f)                                    AS failed_last_minute
FROM queues q
WHERE q.queue IS NOT NULL
LIMIT $2
