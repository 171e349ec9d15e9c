-- Per queue: jobs that finished in the last minute, at most $1 in all (a queue's count that
-- makes the total reach $1 is a lower bound). No index covers finished_at, so on a large
-- table this reads it whole, unless $1 rows match first: the dashboard runs it only when
-- queue_finished.sql stopped early, under the statement timeout. At most $2 queues.
SELECT queue, count(*) AS last_minute
FROM (SELECT queue
      FROM {schema}.jobs
      WHERE status IN ('done', 'failed')
        AND finished_at > now() - interval '1 minute'
      LIMIT $1) r
GROUP BY queue
ORDER BY queue
LIMIT $2
