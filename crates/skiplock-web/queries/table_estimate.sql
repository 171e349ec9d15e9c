-- The planner's estimate of the jobs table's rows (pg_class.reltuples, as of the last vacuum
-- or analyze; negative or zero when never taken). $1 the schema name.
SELECT c.reltuples::float8 AS reltuples
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = 'jobs'
LIMIT 1
