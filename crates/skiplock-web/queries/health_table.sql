-- The jobs table from the statistics views: live and dead row versions, the last manual and
-- automatic vacuum and analyze (epoch seconds), how many of each, and the size with indexes
-- and TOAST. $1 the schema name.
SELECT n_live_tup, n_dead_tup,
       extract(epoch FROM last_vacuum)::float8            AS last_vacuum,
       extract(epoch FROM last_autovacuum)::float8        AS last_autovacuum,
       extract(epoch FROM last_analyze)::float8           AS last_analyze,
       extract(epoch FROM last_autoanalyze)::float8       AS last_autoanalyze,
       vacuum_count, autovacuum_count,
       pg_total_relation_size(relid)                      AS total_bytes,
       extract(epoch FROM now())::float8                  AS now
FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = 'jobs'
LIMIT 1
