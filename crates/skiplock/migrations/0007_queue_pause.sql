-- skiplock migration 7: paused queues.
--
-- One row per queue that was ever paused (a queue with no row is not paused). The claim
-- (job_claim.sql) takes nothing from a paused queue: the pause lives here, in the database,
-- so that every worker of every process on this schema honours it at its next claim,
-- whatever it heard or missed (LISTEN off, through PgBouncer, restarted). Notifications only
-- make it take effect sooner.
--
--   paused_at  when the current pause began (NULL when not paused)
--   paused_by  who paused it, as the caller said (free text, for operators)
--   updated_at the last pause or resume
CREATE TABLE {schema}.queues (
  name       text        PRIMARY KEY,
  paused     boolean     NOT NULL DEFAULT false,
  paused_at  timestamptz,
  paused_by  text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  -- Names as jobs.queue allows them.
  CONSTRAINT queues_name_check CHECK (octet_length(name) BETWEEN 1 AND 128 AND
    ltrim(name, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
  CONSTRAINT queues_paused_check CHECK (paused = (paused_at IS NOT NULL)),
  CONSTRAINT queues_paused_by_check CHECK (octet_length(paused_by) <= 256)
);

-- Every claim reads this table: whoever may use the jobs table keeps working after the
-- upgrade. Each role's rights on jobs (SELECT, INSERT, UPDATE, DELETE) are given to it on
-- queues too: a worker can see pauses, and whoever could change jobs can pause and resume.
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
    EXECUTE format('GRANT %s ON {schema}.queues TO %s', g.privilege, g.grantee);
  END LOOP;
END
$$;
