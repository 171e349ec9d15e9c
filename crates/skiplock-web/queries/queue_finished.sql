-- Per queue: done and failed jobs, and how many finished in the last minute, among at most
-- $1 finished rows. When fewer than $1 come back, every finished row was read and the counts
-- are exact; otherwise the scan stopped early (cheap however large the table) and the
-- dashboard shows estimates instead. At most $2 queues.
SELECT queue,
       count(*) FILTER (WHERE status = 'done')                                AS done,
       count(*) FILTER (WHERE status = 'failed')                              AS failed,
       count(*) FILTER (WHERE finished_at > now() - interval '1 minute')      AS last_minute
FROM (SELECT queue, status, finished_at
      FROM {schema}.jobs
      WHERE status IN ('done', 'failed')
      LIMIT $1) f
GROUP BY queue
ORDER BY queue
LIMIT $2
