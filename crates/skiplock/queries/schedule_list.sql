-- The schedules and the database's clock, in one statement: the scheduler's read and
-- `skiplock schedule list`. One row even when there is no schedule (then name is NULL), so
-- that the clock always comes back.
--
-- $1 a fixed time to use instead of now() (NULL: the database's clock; tests move time
-- with it), $2 whether paused schedules are included.
SELECT c.now, s.name, s.cron, s.time_zone, s.queue, s.kind, s.payload::text AS payload,
       s.priority, s.max_attempts, s.missed, s.paused, s.last_fire_at, s.created_at,
       s.updated_at
FROM (SELECT coalesce($1::timestamptz, now()) AS now) AS c
LEFT JOIN {schema}.schedules AS s ON $2::bool OR NOT s.paused
ORDER BY s.name
