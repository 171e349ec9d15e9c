-- Per queue and status: how many jobs, and for ready jobs the age of the oldest (seconds, by
-- the database's clock); per queue, how many finished in the last minute (with the jobs
-- deleted as they completed: `d` below). One pass over the
-- table: cheap for a kept-small table, a sequential scan for a large one. A queued job with
-- no attempt left (attempts >= max_attempts) is never claimed, so it is not ready (the
-- reaper moves it to failed), nor is a held one (waiting for its turn in a sequence). A paused queue is listed even with no job (`paused`).
-- `unserved`: queued jobs a worker handed back because it had no handler for their kind
-- (job_finish_many.sql's `unserved` outcome, whose error starts with 'unserved: '), waiting
-- for a worker that handles it.
WITH j AS (
  SELECT queue,
         count(*) FILTER (WHERE status = 'queued')                         AS queued,
         count(*) FILTER (WHERE status = 'queued' AND held IS NULL AND run_at <= now()
                          AND attempts < max_attempts)                     AS ready,
         count(*) FILTER (WHERE status = 'running')                        AS running,
         count(*) FILTER (WHERE status = 'done')                           AS done,
         count(*) FILTER (WHERE status = 'failed')                         AS failed,
         coalesce(extract(epoch FROM now() - min(run_at)
                  FILTER (WHERE status = 'queued' AND held IS NULL AND run_at <= now()
                          AND attempts < max_attempts)), 0)::float8
                                                                            AS oldest_ready_age_s,
         count(*) FILTER (WHERE status IN ('done', 'failed')
                          AND finished_at > now() - interval '1 minute')   AS finished_last_minute,
         count(*) FILTER (WHERE status = 'queued'
                          AND last_error LIKE 'unserved: %')                AS unserved,
         -- For the per-minute rollup (queue_stats, written by the gauges service): jobs
         -- scheduled for later, and jobs that reached done or failed in this minute and in
         -- the one before (whose count is final once a round ran after it ended).
         count(*) FILTER (WHERE status = 'queued' AND run_at > now())       AS scheduled,
         count(*) FILTER (WHERE status = 'done'
                          AND finished_at >= date_trunc('minute', now()))   AS done_minute,
         count(*) FILTER (WHERE status = 'failed'
                          AND finished_at >= date_trunc('minute', now()))   AS failed_minute,
         count(*) FILTER (WHERE status = 'done'
                          AND finished_at >= date_trunc('minute', now()) - interval '1 minute'
                          AND finished_at < date_trunc('minute', now()))    AS done_prev_minute,
         count(*) FILTER (WHERE status = 'failed'
                          AND finished_at >= date_trunc('minute', now()) - interval '1 minute'
                          AND finished_at < date_trunc('minute', now()))    AS failed_prev_minute
  FROM {schema}.jobs
  GROUP BY queue
), d AS (
  -- Jobs deleted as they completed (WorkerConfig::delete_done, migration 21), counted by
  -- the minute of their completion: this minute's and the one before's, by the minute
  -- index. They are done jobs of their minute for the rollup. For the last minute's count
  -- they are an estimate: this minute's, and the share of the minute before that lies
  -- within the last 60 s (rounded up, so that it is not 0 while such jobs finished).
  SELECT queue,
         (sum(n) FILTER (WHERE minute = date_trunc('minute', now())))::int8           AS minute,
         (sum(n) FILTER (WHERE minute = date_trunc('minute', now()) - interval '1 minute'))::int8 AS prev
  FROM {schema}.done_deleted
  WHERE minute >= date_trunc('minute', now()) - interval '1 minute'
  GROUP BY queue
)
SELECT coalesce(j.queue, p.name, d.queue)         AS queue,
       coalesce(j.queued, 0)                      AS queued,
       coalesce(j.ready, 0)                       AS ready,
       coalesce(j.running, 0)                     AS running,
       coalesce(j.done, 0)                        AS done,
       coalesce(j.failed, 0)                      AS failed,
       coalesce(j.oldest_ready_age_s, 0)::float8  AS oldest_ready_age_s,
       coalesce(j.finished_last_minute, 0)
         + coalesce(d.minute, 0)
         + ceil(coalesce(d.prev, 0)
                * (1 - extract(epoch FROM now() - date_trunc('minute', now())) / 60))::int8
                                                  AS finished_last_minute,
       coalesce(j.unserved, 0)                    AS unserved,
       p.name IS NOT NULL                         AS paused,
       coalesce(j.scheduled, 0)                   AS scheduled,
       coalesce(j.done_minute, 0) + coalesce(d.minute, 0) AS done_minute,
       coalesce(j.failed_minute, 0)               AS failed_minute,
       coalesce(j.done_prev_minute, 0) + coalesce(d.prev, 0) AS done_prev_minute,
       coalesce(j.failed_prev_minute, 0)          AS failed_prev_minute,
       date_trunc('minute', now())                AS minute
FROM j
FULL JOIN (SELECT name FROM {schema}.queues WHERE paused) p ON p.name = j.queue
FULL JOIN d ON d.queue = coalesce(j.queue, p.name)
ORDER BY 1
