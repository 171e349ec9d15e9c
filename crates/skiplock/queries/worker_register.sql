-- Register a worker (migration 14): one row per running Worker, its id returned for its
-- presence updates. $1 host, $2 pid, $3 queues (JSON text: queue -> concurrency), $4 total
-- concurrency, $5 poll off, $6 presence interval in microseconds, $7 skiplock's version.
--
-- The same statement deletes the rows of workers stopped, or silent, for more than 24 hours
-- (a process that died without stopping, or one that slept that long: a sleeping worker that
-- wakes registers again). The table holds one row per worker started in the last day or
-- still running, so the scan is short.
WITH gone AS (
  DELETE FROM {schema}.workers
  WHERE coalesce(stopped_at, last_seen) < now() - interval '24 hours'
)
INSERT INTO {schema}.workers (host, pid, queues, concurrency, poll_off, heartbeat, version)
VALUES ($1, $2, $3::jsonb, $4, $5, $6::int8 * interval '1 microsecond', $7)
RETURNING id
