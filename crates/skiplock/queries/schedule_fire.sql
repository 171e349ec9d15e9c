-- Fire one schedule: advance its cursor and enqueue the fire's jobs in the same statement,
-- guarded by the cursor's old value (a compare-and-set). Two schedulers that read the same
-- cursor and race on the same fire: the second UPDATE waits for the first's row lock, then
-- finds the cursor moved and updates nothing, so the INSERT, which takes its rows from the
-- UPDATE, enqueues nothing either. A schedule paused, removed or redefined since it was
-- read is left alone too (the next round reads it again).
--
-- $1 name, $2 the cursor as read, $3 the new cursor (the latest fire now due, enqueued or
-- skipped as missed), $4 the fire times to enqueue, oldest first (empty when every due
-- fire was missed and the policy skips them: then only the cursor moves), $5 and $6 the
-- cron expression and time zone the fire times were computed from. Each job's run_at is
-- its fire time and its schedule column the schedule's name.
WITH advanced AS (
  UPDATE {schema}.schedules
  SET last_fire_at = $3::timestamptz
  WHERE name = $1
    AND last_fire_at = $2::timestamptz -- fence
    AND cron = $5 AND time_zone = $6
    AND NOT paused
  RETURNING name, queue, kind, payload, priority, max_attempts
), fired AS (
  INSERT INTO {schema}.jobs (queue, kind, payload, priority, max_attempts, run_at, schedule)
  SELECT a.queue, a.kind, a.payload, a.priority, a.max_attempts, f.at, a.name
  FROM advanced AS a
  CROSS JOIN unnest($4::timestamptz[]) WITH ORDINALITY AS f(at, n)
  ORDER BY f.n
  RETURNING id
)
SELECT (SELECT count(*) FROM advanced) AS advanced, (SELECT count(*) FROM fired) AS fired
