-- Add a schedule, or update the definition of the one of that name, keeping its paused flag.
-- Its timing is its cron expression and its time zone. An update that changes neither keeps
-- the cursor (last_fire_at), so that registering the same schedules on every start, or
-- editing a payload, queue, kind, priority, max_attempts or missed-fire policy, neither
-- replays nor skips fires. An update that changes either starts the cursor at the change
-- (never earlier than it was), as for a new schedule: fires that were never due under the new
-- timing are not made up, and neither are those the old timing had left due. A definition
-- that did not change is not written at all (no row comes back).
--
-- $1 name, $2 cron, $3 time zone, $4 queue, $5 kind, $6 payload (JSON text, validated by the
-- caller), $7 priority, $8 max_attempts, $9 missed-fire policy. All checked by the caller.
-- Returns whether the schedule was added, and whether its timing changed (true when added).
WITH old AS (
  -- The timing before this statement (its snapshot), for the answer only: the cursor's rule
  -- below is applied to the row under its lock. (No FOR UPDATE here: it would run after the
  -- update and no longer see the row.)
  SELECT cron, time_zone FROM {schema}.schedules WHERE name = $1
)
INSERT INTO {schema}.schedules AS s
  (name, cron, time_zone, queue, kind, payload, priority, max_attempts, missed)
VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9)
ON CONFLICT (name) DO UPDATE
  SET cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, queue = EXCLUDED.queue,
      kind = EXCLUDED.kind, payload = EXCLUDED.payload, priority = EXCLUDED.priority,
      max_attempts = EXCLUDED.max_attempts, missed = EXCLUDED.missed, updated_at = now(),
      last_fire_at = CASE WHEN (s.cron, s.time_zone) IS DISTINCT FROM
                               (EXCLUDED.cron, EXCLUDED.time_zone)
                          THEN greatest(s.last_fire_at, date_trunc('second', now()))
                          ELSE s.last_fire_at END
  WHERE (s.cron, s.time_zone, s.queue, s.kind, s.payload, s.priority, s.max_attempts, s.missed)
        IS DISTINCT FROM
        (EXCLUDED.cron, EXCLUDED.time_zone, EXCLUDED.queue, EXCLUDED.kind, EXCLUDED.payload,
         EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.missed)
RETURNING s.created_at = s.updated_at AS created,
          NOT EXISTS (SELECT 1 FROM old
                      WHERE (old.cron, old.time_zone) = (s.cron, s.time_zone)) AS retimed
