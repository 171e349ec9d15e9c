-- Benchmarks only: no autovacuum and no autoanalyze of the jobs table from now on, so that
-- the statistics the next ANALYZE takes (while every job is still queued) stay in force for
-- the whole run: the worst case for plans over running jobs (see tests/it/plans.rs).
ALTER TABLE {schema}.jobs SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)
