-- Resume queue $1. Returns one row: whether it was paused (`changed`).
--
-- The notification 'resume:<queue>' (sent at commit, whether or not the queue was paused)
-- makes listening workers claim at once; workers that miss it claim at their next poll.
WITH resumed AS (
  UPDATE {schema}.queues
  SET paused     = false,
      paused_at  = NULL,
      paused_by  = NULL,
      updated_at = now()
  WHERE name = $1 AND paused
  RETURNING name
)
SELECT EXISTS (SELECT 1 FROM resumed) AS changed,
       pg_notify({channel}, 'resume:' || $1)::text AS notified
