-- skiplock migration 22: a job's names checked when they are written, not on every update.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: PostgreSQL checks every CHECK constraint of a table on every UPDATE of a row,
-- whatever columns the UPDATE sets, so each claim and each completion ran the queue, kind,
-- key and sequence checks again on names no UPDATE of theirs changes. A row trigger's WHEN
-- condition is evaluated only for the statements the trigger is for: BEFORE INSERT, and
-- BEFORE UPDATE OF the four name columns (an UPDATE whose SET list names one of them). The
-- condition is the constraints' own expression, evaluated by the server without calling the
-- trigger's function; only a refused name calls it, and it raises the error the constraint
-- raised (SQLSTATE 23514, check_violation, the same constraint name and message), so a
-- refusal reads as before. Measured in pgbench on the worker's claim in turn (100,000 jobs,
-- 4 clients, three rounds alternating, short names): with the deleting completion,
-- 81,806-84,516 jobs/s with the four constraints and 87,308-89,027 without them. With the
-- trigger in their place (the medians of three rounds at 4 and at 8 clients; single runs
-- move by 10% here): jobs kept, 64,227 -> 66,293 and 60,573 -> 66,784; jobs deleted,
-- 76,850 -> 83,282 and 81,481 -> 79,744. Longer names cost more to check.
--
-- What is the same: every row inserted (INSERT, COPY, INSERT ... ON CONFLICT) and every
-- UPDATE that sets a name is checked against the same rule (the test
-- it::bad_input::name_checks_accept_exactly_the_documented_names inserts every ASCII
-- character into each column and updates each column). What differs: the check is a
-- trigger, so it does not fire where triggers do not (session_replication_role = replica,
-- or ALTER TABLE ... DISABLE TRIGGER ALL by the table's owner), and `\d jobs` lists it
-- among the triggers. The queues' and schedules' names keep their CHECK constraints: their
-- rows are few and rarely updated.
CREATE OR REPLACE FUNCTION {schema}.jobs_name_refused() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  c text;
BEGIN
  c := CASE
    WHEN NOT (octet_length(NEW.queue) BETWEEN 1 AND 128 AND
              NEW.queue !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-]')
      THEN 'jobs_queue_check'
    WHEN NOT (octet_length(NEW.kind) BETWEEN 1 AND 128 AND
              NEW.kind !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-]')
      THEN 'jobs_kind_check'
    WHEN NOT (NEW.key IS NULL OR (octet_length(NEW.key) BETWEEN 1 AND 128 AND
              NEW.key !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@/-]'))
      THEN 'jobs_key_check'
    ELSE 'jobs_sequence_check'
  END;
  RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, c
    USING ERRCODE = 'check_violation', CONSTRAINT = c, TABLE = TG_TABLE_NAME,
          SCHEMA = TG_TABLE_SCHEMA;
END;
$$;

DROP TRIGGER IF EXISTS jobs_names_check ON {schema}.jobs;
CREATE TRIGGER jobs_names_check
BEFORE INSERT OR UPDATE OF queue, kind, key, sequence ON {schema}.jobs
FOR EACH ROW
WHEN (NOT (
  octet_length(NEW.queue) BETWEEN 1 AND 128 AND
  NEW.queue !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-]' AND
  octet_length(NEW.kind) BETWEEN 1 AND 128 AND
  NEW.kind !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-]' AND
  (NEW.key IS NULL OR (octet_length(NEW.key) BETWEEN 1 AND 128 AND
   NEW.key !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@/-]')) AND
  (NEW.sequence IS NULL OR (octet_length(NEW.sequence) BETWEEN 1 AND 128 AND
   NEW.sequence !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@/-]'))))
EXECUTE FUNCTION {schema}.jobs_name_refused();

-- Dropped after the trigger exists, in the same transaction: no row is ever written
-- unchecked.
ALTER TABLE {schema}.jobs
  DROP CONSTRAINT IF EXISTS jobs_queue_check,
  DROP CONSTRAINT IF EXISTS jobs_kind_check,
  DROP CONSTRAINT IF EXISTS jobs_key_check,
  DROP CONSTRAINT IF EXISTS jobs_sequence_check;
