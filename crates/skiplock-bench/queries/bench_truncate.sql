-- Benchmarks only: empty the jobs table and the workflow edges, so that each enqueue run
-- starts from empty tables.
TRUNCATE {schema}.jobs, {schema}.job_deps
