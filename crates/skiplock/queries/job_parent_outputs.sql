-- The outputs of the jobs job $1 waits for: one row per parent that still exists, its id
-- and its output as JSON text (NULL when it stored none). What a child reads
-- (`JobContext::parent_outputs`, and `SKIPLOCK_PARENT_OUTPUTS` for `--exec`).
SELECT j.id, j.output::text AS output
FROM {schema}.jobs j
WHERE j.id = ANY ((SELECT x.after FROM {schema}.jobs x WHERE x.id = $1)::int8[])
ORDER BY j.id
