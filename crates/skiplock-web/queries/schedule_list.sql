-- The schedules (at most $1, by name), with the database's clock as `now`. Times are epoch
-- seconds.
SELECT name, cron, time_zone, queue, kind, paused,
       extract(epoch FROM last_fire_at)::float8 AS last_fire_at,
       extract(epoch FROM now())::float8        AS now
FROM {schema}.schedules
ORDER BY name
LIMIT $1
