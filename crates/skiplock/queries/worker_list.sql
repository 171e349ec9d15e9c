-- The registered workers, newest first, with the state the database's clock gives them:
--   gone      stopped, or not poll-off and silent for longer than its presence interval
--             plus a grace of as much again (at least 2 seconds): two missed writes
--   sleeping  poll-off and silent as long (it writes nothing while idle, by design)
--   running   seen within that time
-- (Client::workers, `skiplock workers`). The table holds one row per worker started in the
-- last day or still running.
SELECT id, host, pid, queues::text AS queues, concurrency, running, poll_off,
       (extract(epoch FROM heartbeat) * 1000000)::int8 AS heartbeat_us, version,
       started_at, last_seen, stopped_at,
       CASE
         WHEN stopped_at IS NOT NULL THEN 'gone'
         WHEN last_seen >= now() - heartbeat - greatest(heartbeat, interval '2 seconds')
           THEN 'running'
         WHEN poll_off THEN 'sleeping'
         ELSE 'gone'
       END AS state
FROM {schema}.workers
ORDER BY id DESC
