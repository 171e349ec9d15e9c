-- The lowest and highest job ids (both NULL for an empty table): the ends of the walk of
-- `skiplock retry`, `cancel` and `delete` with filters, which reads jobs_match.sql one
-- window of ids at a time. Two probes of the primary key's ends.
SELECT min(id) AS low, max(id) AS high FROM {schema}.jobs
