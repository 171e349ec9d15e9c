-- One round of the per-queue, per-minute rollup (migration 14), written by the elected
-- gauges service from the counts of its pass over the jobs table (health_queues.sql), never
-- by the hot path. $1 the minute of that pass (by the database's clock), then one array
-- element per queue: $2 queue, $3 done and $4 failed in that minute so far, $5 available
-- (ready), $6 scheduled, $7 running, $8 done and $9 failed in the minute before.
--
-- The minute's row is written whole: a later round in the same minute overwrites it with
-- its later, exact counts and depths. The minute before gets its final done and failed
-- counts (the jobs that finished after its last round); a minute that had no round of its
-- own gets its row here, with the depths read now, just after it.
--
-- Rows older than 25 hours are deleted in the same statement (by the minute index: a few
-- rows per queue per round).
WITH v AS (
  SELECT *
  FROM unnest($2::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::int8[],
              $8::int8[], $9::int8[])
       AS v(queue, done, failed, available, scheduled, running, done_prev, failed_prev)
), now_row AS (
  INSERT INTO {schema}.queue_stats AS s (queue, minute, done, failed, available, scheduled,
                                         running)
  SELECT queue, $1::timestamptz, done, failed, available, scheduled, running FROM v
  ON CONFLICT (queue, minute) DO UPDATE
  SET done = EXCLUDED.done, failed = EXCLUDED.failed, available = EXCLUDED.available,
      scheduled = EXCLUDED.scheduled, running = EXCLUDED.running
), prev_row AS (
  INSERT INTO {schema}.queue_stats AS s (queue, minute, done, failed, available, scheduled,
                                         running)
  SELECT queue, $1::timestamptz - interval '1 minute', done_prev, failed_prev, available,
         scheduled, running
  FROM v
  WHERE done_prev > 0 OR failed_prev > 0
  ON CONFLICT (queue, minute) DO UPDATE
  SET done = EXCLUDED.done, failed = EXCLUDED.failed
), old AS (
  DELETE FROM {schema}.queue_stats WHERE minute < now() - interval '25 hours'
)
SELECT count(*) FROM v
