-- Jobs done, and jobs still running, in the scratch table after a pgbench ceiling run.
SELECT count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'running') AS running
FROM {schema}.jobs
