-- skiplock migration 21: counts of the jobs deleted as they completed.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- A worker with WorkerConfig::delete_done deletes a completed job in the statement that
-- completes it (job_complete_delete_many.sql) instead of keeping it as `done` until pruning.
-- The per-minute rollup (queue_stats, migration 14) counts done jobs from the table and
-- cannot see a deleted one: the same statement counts its deletions here, in the same
-- transaction, so that the counts stay exact. One row per server session, minute and queue:
-- a session runs one transaction at a time, so no two completions ever wait for the same
-- row, however many workers complete at once. The rollup (health_queues.sql) adds them to the
-- done jobs of each minute; the completing statement deletes rows older than 25 hours.
CREATE TABLE IF NOT EXISTS {schema}.done_deleted (
  session int         NOT NULL,   -- pg_backend_pid() of the session that deleted them
  minute  timestamptz NOT NULL,   -- date_trunc('minute', now()) of its transaction
  queue   text        NOT NULL,
  n       bigint      NOT NULL,
  PRIMARY KEY (session, minute, queue)
);
-- The rollup's reads of a minute and the deletion of rows older than 25 hours.
CREATE INDEX IF NOT EXISTS done_deleted_minute_idx ON {schema}.done_deleted (minute);

-- Whoever may use the jobs table may use this one (as migration 14 did for its tables).
DO $$
DECLARE
  g record;
BEGIN
  FOR g IN
    SELECT a.privilege_type AS privilege,
           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee
    FROM pg_class c
    CROSS JOIN LATERAL aclexplode(c.relacl) a
    WHERE c.oid = '{schema}.jobs'::regclass
      AND a.grantee <> c.relowner
      AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
  LOOP
    EXECUTE format('GRANT %s ON {schema}.done_deleted TO %s', g.privilege, g.grantee);
  END LOOP;
END
$$;
