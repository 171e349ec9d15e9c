-- The vacuum service's VACUUM gives way to a lock waiter, as autovacuum does: while it runs,
-- the service asks every 100 ms whether a session waits for a lock on the jobs table that
-- the VACUUM holds (a CREATE INDEX, an ALTER TABLE: a migration). If one does, the VACUUM is
-- cancelled, so that the DDL gets its lock at once instead of queueing every claim,
-- heartbeat and outcome write behind it until the VACUUM ends; the next round vacuums again.
--
-- $1 is the VACUUM's statement text (job_vacuum.sql as rendered): the VACUUM runs on another
-- connection, maybe through a pooler, so it is found by its text, not by a backend pid.
-- pg_blocking_pids runs only for sessions that wait on the jobs table. Cancelling a backend
-- of the same role needs no privilege. Returns one row per VACUUM cancelled.
SELECT pg_cancel_backend(v.pid) AS cancelled
FROM pg_stat_activity v
WHERE v.datname = current_database()
  AND v.state = 'active'
  AND v.query = $1
  AND EXISTS (
    SELECT 1
    FROM pg_locks l
    WHERE l.locktype = 'relation'
      AND l.relation = '{schema}.jobs'::regclass
      AND NOT l.granted
      AND v.pid = ANY (pg_blocking_pids(l.pid))
  )
