-- Jobs done, jobs still running, and rows left, in the scratch table after a pgbench
-- ceiling run (a completion that deletes leaves no row for a job it completed).
SELECT count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) AS rows
FROM {schema}.jobs
