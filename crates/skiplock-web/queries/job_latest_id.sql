-- The highest job id (through the primary key, backwards), or none. A bulk action's confirm
-- page records it, so that the action touches only jobs that existed when it was shown.
SELECT id FROM {schema}.jobs ORDER BY id DESC LIMIT 1
