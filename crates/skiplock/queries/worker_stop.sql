-- A worker's clean shutdown: stopped now, nothing running. $1 its id.
UPDATE {schema}.workers
SET stopped_at = now(),
    last_seen  = now(),
    running    = 0
WHERE id = $1
