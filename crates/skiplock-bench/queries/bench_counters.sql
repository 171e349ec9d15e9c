-- Benchmarks only: the write-ahead log position (bytes), this database's committed and rolled
-- back transactions, and the jobs table's dead tuples. $1 the schema name.
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8 AS wal_bytes,
       (SELECT xact_commit + xact_rollback FROM pg_stat_database
         WHERE datname = current_database())::int8 AS transactions,
       coalesce((SELECT n_dead_tup FROM pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = 'jobs'), 0)::int8 AS dead_tuples,
       pg_total_relation_size(format('%I.jobs', $1::text)::regclass)::int8 AS table_bytes
