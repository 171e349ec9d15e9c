-- How many jobs wait for job $1 (its children), and how many of them still wait for it (their
-- edge is not settled: it is not done), counted up to $2 edges through the primary key of
-- job_deps, so that a job with a million children costs no more than the bound.
SELECT count(*)::int8 AS total, count(*) FILTER (WHERE NOT c.satisfied)::int8 AS waiting
FROM (SELECT d.satisfied FROM {schema}.job_deps d WHERE d.parent = $1 LIMIT $2) c
