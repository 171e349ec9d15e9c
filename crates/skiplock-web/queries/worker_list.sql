-- The workers (migration 14), at most $1: those not gone, and those gone within the last 24
-- hours, by state (running, sleeping, gone), then host, pid and id. A worker's state, by the
-- expression of the library's worker_list.sql (`skiplock workers`):
--   gone      stopped at a clean shutdown, or, with the poll on, silent for longer than its
--             own heartbeat interval plus a grace of as much again (at least 2 seconds): two
--             missed heartbeats (it died, or lost the database)
--   running   seen within that time
--   sleeping  with the poll off and silent as long: it writes nothing while idle, so silence
--             is not death
-- When it went: stopped_at, or for a silent one its last sign of life. Its queues as two
-- arrays in name order: names and their concurrency (a `queues` that is not an object reads
-- as none). Times are epoch seconds; `now` is the database's clock. The table holds one row
-- per worker running or started in the last day (workers delete older rows as they
-- register), and the statement reads it whole.
SELECT w.id, w.host, w.pid, w.concurrency, w.running, w.poll_off, w.version, st.state,
       extract(epoch FROM w.heartbeat)::float8            AS heartbeat_s,
       extract(epoch FROM w.started_at)::float8           AS started_at,
       extract(epoch FROM w.last_seen)::float8            AS last_seen,
       extract(epoch FROM w.stopped_at)::float8           AS stopped_at,
       ARRAY(SELECT q.key FROM jsonb_each_text(qs.queues) q ORDER BY q.key)   AS queue_names,
       ARRAY(SELECT q.value FROM jsonb_each_text(qs.queues) q ORDER BY q.key) AS queue_slots,
       extract(epoch FROM now())::float8                  AS now
FROM {schema}.workers w
CROSS JOIN LATERAL (
  SELECT CASE WHEN jsonb_typeof(w.queues) = 'object' THEN w.queues ELSE '{}'::jsonb END
           AS queues
) qs
CROSS JOIN LATERAL (
  SELECT CASE
           WHEN w.stopped_at IS NOT NULL THEN 'gone'
           WHEN w.last_seen >= now() - w.heartbeat - greatest(w.heartbeat, interval '2 seconds')
             THEN 'running'
           WHEN w.poll_off THEN 'sleeping'
           ELSE 'gone'
         END AS state
) st
WHERE st.state <> 'gone'
   OR coalesce(w.stopped_at, w.last_seen) > now() - interval '24 hours'
ORDER BY CASE st.state WHEN 'running' THEN 0 WHEN 'sleeping' THEN 1 ELSE 2 END,
         w.host, w.pid, w.id
LIMIT $1
