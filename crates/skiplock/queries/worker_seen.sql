-- A worker's presence heartbeat: it is alive, with $2 jobs running. $1 its id. Returns no
-- row if its row is gone (deleted after a day of silence): the worker then registers again.
UPDATE {schema}.workers
SET last_seen = now(),
    running   = $2
WHERE id = $1
RETURNING id
