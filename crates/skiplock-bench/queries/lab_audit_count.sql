-- Transitions into `done` recorded by lab_audit_install.sql, and how many distinct jobs.
SELECT count(*), count(DISTINCT job_id) FROM {schema}.lab_completions
