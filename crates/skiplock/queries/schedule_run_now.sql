-- Enqueue one job from a schedule's definition now, paused or not, without touching its
-- cursor: the schedule's own fires go on as before. Returns the job's id, queue and kind (no
-- row: no such schedule).
INSERT INTO {schema}.jobs (queue, kind, payload, priority, max_attempts, schedule)
SELECT queue, kind, payload, priority, max_attempts, name
FROM {schema}.schedules
WHERE name = $1
RETURNING id, queue, kind
