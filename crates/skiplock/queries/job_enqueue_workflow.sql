-- Enqueue a workflow: $1 is the JSON array that the SQL function enqueue_workflow()
-- (migration 13) takes, each job with its optional "ref" and "after". Returns each job's
-- position (from 1) and its new id, in the array's order. All or nothing.
SELECT n, id FROM {schema}.enqueue_workflow($1::text::jsonb) ORDER BY n
