-- Pause ($2 true) or resume ($2 false) a schedule by name. Resuming a paused schedule moves
-- its cursor to the present: the fires it would have had while paused are not made up.
UPDATE {schema}.schedules
SET paused = $2::bool,
    last_fire_at = CASE WHEN paused AND NOT $2::bool
                        THEN greatest(last_fire_at, date_trunc('second', now()))
                        ELSE last_fire_at END,
    updated_at = now()
WHERE name = $1
