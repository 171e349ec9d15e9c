-- The lease audit: every lease granted (claim) or renewed (heartbeat), per attempt, with its
-- deadline. Recorded by a trigger rather than derived from the lease length, so that the
-- check is exact whatever the heartbeats did.
CREATE TABLE IF NOT EXISTS torture.lab_leases (
  job_id       bigint      NOT NULL,
  attempts     int         NOT NULL,
  locked_until timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION torture.lab_audit_lease() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO torture.lab_leases (job_id, attempts, locked_until)
  SELECT n.id, n.attempts, n.locked_until
  FROM new_rows n JOIN old_rows o ON o.id = n.id
  WHERE n.status = 'running' AND n.locked_until IS DISTINCT FROM o.locked_until;
  RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS lab_audit_lease ON torture.jobs;
CREATE TRIGGER lab_audit_lease
AFTER UPDATE ON torture.jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION torture.lab_audit_lease()
