-- How many jobs wait for job $1 (its children), and how many of them are still waiting.
SELECT count(*) AS total, count(*) FILTER (WHERE NOT d.satisfied) AS waiting
FROM {schema}.job_deps d
WHERE d.parent = $1
