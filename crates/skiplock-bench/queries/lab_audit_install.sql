-- For the demo and the lab: record every transition of a job into `done`, by a trigger, so
-- that a job completed twice (done, then somehow queued and done again) shows up in the
-- count independently of any worker's own accounting. Not part of the queue's schema.
CREATE TABLE IF NOT EXISTS {schema}.lab_completions (
  job_id   bigint      NOT NULL,
  attempts int         NOT NULL,
  at       timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION {schema}.lab_audit_done() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {schema}.lab_completions (job_id, attempts)
  SELECT n.id, n.attempts
  FROM new_rows n JOIN old_rows o ON o.id = n.id
  WHERE n.status = 'done' AND o.status <> 'done';
  RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS lab_audit_done ON {schema}.jobs;
CREATE TRIGGER lab_audit_done
AFTER UPDATE ON {schema}.jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_audit_done()
