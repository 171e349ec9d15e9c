-- Benchmarks only: add $1 finished (`done`) jobs to the table in one statement, as months of
-- kept history would, to measure whether the claim slows down with them.
INSERT INTO {schema}.jobs (queue, kind, payload, status, attempts, finished_at)
SELECT 'bench', 'noop', '{}'::jsonb, 'done', 1, now()
FROM generate_series(1, $1::int8)
