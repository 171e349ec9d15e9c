-- Add a schedule, or update the definition of the one of that name. An update keeps the
-- cursor (last_fire_at) and the paused flag, so that registering the same schedules on
-- every start neither replays nor skips fires; a definition that did not change is not
-- written at all (no row comes back).
--
-- $1 name, $2 cron, $3 time zone, $4 queue, $5 kind, $6 payload (JSON text, validated by the
-- caller), $7 priority, $8 max_attempts, $9 missed-fire policy. All checked by the caller.
INSERT INTO {schema}.schedules AS s
  (name, cron, time_zone, queue, kind, payload, priority, max_attempts, missed)
VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9)
ON CONFLICT (name) DO UPDATE
  SET cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, queue = EXCLUDED.queue,
      kind = EXCLUDED.kind, payload = EXCLUDED.payload, priority = EXCLUDED.priority,
      max_attempts = EXCLUDED.max_attempts, missed = EXCLUDED.missed, updated_at = now()
  WHERE (s.cron, s.time_zone, s.queue, s.kind, s.payload, s.priority, s.max_attempts, s.missed)
        IS DISTINCT FROM
        (EXCLUDED.cron, EXCLUDED.time_zone, EXCLUDED.queue, EXCLUDED.kind, EXCLUDED.payload,
         EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.missed)
RETURNING s.created_at = s.updated_at AS created
