-- The ids a bulk action works on: jobs matching the filters ($1 status, $2 queue, $3 kind,
-- each ignored when NULL) whose id is at most $4 (the newest id when the action was
-- confirmed) and at least $6 (no bound when NULL; for a filter no index serves, the end of the
-- scan budget below $4), oldest first, at most $5. The action itself goes through the library's
-- retry, cancel or delete, which lock and re-check each row. Queued jobs are found through
-- their two partial indexes, and with $7 held jobs only, as in job_list_older.sql.
SELECT id
FROM {schema}.jobs
WHERE ($1::text IS NULL OR status = $1::text)
  AND ($1::text IS DISTINCT FROM 'queued'
       OR (NOT $7::bool AND status = 'queued' AND held IS NULL)
       OR (held IS NOT NULL AND status = 'queued'))
  AND ($2::text IS NULL OR queue = $2::text)
  AND ($3::text IS NULL OR kind = $3::text)
  AND id <= $4::int8
  AND ($6::int8 IS NULL OR id >= $6::int8)
ORDER BY id
LIMIT $5
