-- The limited queues (at most $1, by name; migration 11): their concurrency, per-key and rate
-- limits (NULL: no such limit; the rate is rate_limit starts per rate_period_us microseconds),
-- why the last claim left ready jobs behind (`limit_bound`: 'slots' for want of a
-- concurrency or per-key slot, 'rate' for want of room in the rate window; NULL when it did
-- not) and who set them. The queues table holds one row per queue ever paused or limited, so
-- this reads its few rows.
SELECT name, concurrency, per_key, rate_limit, rate_period_us, limit_bound, limits_by
FROM {schema}.queues
WHERE limited
ORDER BY name
LIMIT $1
