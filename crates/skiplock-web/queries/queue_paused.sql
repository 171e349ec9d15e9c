-- The paused queues (at most $1), with when and by whom, and the database's clock as `now`.
-- Times are epoch seconds. The queues table holds one row per queue ever paused, so this
-- reads its primary key's few rows.
SELECT name,
       extract(epoch FROM paused_at)::float8 AS paused_at,
       paused_by,
       extract(epoch FROM now())::float8     AS now
FROM {schema}.queues
WHERE paused
ORDER BY name
LIMIT $1
