-- Benchmarks only: vacuum and analyze the jobs table, so that every point starts from the
-- same state.
VACUUM (ANALYZE) {schema}.jobs
