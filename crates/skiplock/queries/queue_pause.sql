-- Pause queue $1 ($2: who paused it, or NULL). Returns the queue's pause as it now stands:
-- when it began (microseconds since the epoch, by the database's clock), by whom, and
-- whether this call began it (`changed`; false when it was paused already, and then the
-- first pause's time and author are kept).
--
-- Every claim of the queue (job_claim.sql) reads this row, so the pause holds for every
-- worker on this schema from the moment it commits. The notification 'pause:<queue>' (sent
-- at commit; queue names cannot hold ':') only lets listening workers stop asking sooner.
--
-- `changed` compares the pause's start with this transaction's start: a pause begun by
-- another transaction (even one that committed while this one waited on the row) began at
-- another time.
INSERT INTO {schema}.queues AS q (name, paused, paused_at, paused_by, updated_at)
VALUES ($1, true, now(), $2, now())
ON CONFLICT (name) DO UPDATE
SET paused     = true,
    paused_at  = CASE WHEN q.paused THEN q.paused_at ELSE excluded.paused_at END,
    paused_by  = CASE WHEN q.paused THEN q.paused_by ELSE excluded.paused_by END,
    updated_at = now()
RETURNING q.name,
          (extract(epoch FROM q.paused_at) * 1000000)::int8 AS paused_at_us,
          q.paused_by,
          q.paused_at = now() AS changed,
          pg_notify({channel}, 'pause:' || q.name)::text AS notified
