-- The jobs table's health from the statistics views: live and dead tuples, when it was last
-- vacuumed (by hand and by autovacuum), and its size with indexes. $1 the schema name.
SELECT n_live_tup, n_dead_tup, last_vacuum, last_autovacuum,
       pg_total_relation_size(relid) AS total_bytes
FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = 'jobs'
