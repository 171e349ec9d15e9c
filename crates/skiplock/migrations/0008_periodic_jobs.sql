-- skiplock migration 8: periodic (cron) jobs.
--
-- One row per schedule. Any worker fires it: `last_fire_at` is the durable cursor, the
-- latest fire time enqueued (or skipped as missed), and it advances only in the same
-- statement that inserts the fire's jobs, guarded by its old value (a compare-and-set, see
-- queries/schedule_fire.sql). However many schedulers race on one fire, one enqueues it;
-- a scheduler that dies mid-round leaves the cursor where it was, so the fire is not lost.
CREATE TABLE {schema}.schedules (
  name         text        PRIMARY KEY,
  -- A cron expression (5 fields, or 6 with seconds first) and the IANA time zone it is
  -- read in; both checked by the library before they are stored.
  cron         text        NOT NULL,
  time_zone    text        NOT NULL DEFAULT 'UTC',
  -- What each fire enqueues.
  queue        text        NOT NULL,
  kind         text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT '{}',
  priority     smallint    NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 5,
  -- What happens to fires missed while no worker ran: 'skip', 'latest' or 'catch-up=N'.
  missed       text        NOT NULL DEFAULT 'latest',
  paused       boolean     NOT NULL DEFAULT false,
  -- The cursor. A new schedule starts at its registration (no backfill); resuming a paused
  -- one moves it to the present (fires while paused are not made up).
  last_fire_at timestamptz NOT NULL DEFAULT date_trunc('second', now()),
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT schedules_name_check CHECK (octet_length(name) BETWEEN 1 AND 128 AND
    ltrim(name, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
  CONSTRAINT schedules_queue_check CHECK (octet_length(queue) BETWEEN 1 AND 128 AND
    ltrim(queue, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
  CONSTRAINT schedules_kind_check CHECK (octet_length(kind) BETWEEN 1 AND 128 AND
    ltrim(kind, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-') = ''),
  CONSTRAINT schedules_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 10000),
  CONSTRAINT schedules_missed_check CHECK (missed ~ '^(skip|latest|catch-up=[1-9][0-9]{0,3})$')
);

-- Which schedule enqueued a job (NULL for every other job); its run_at is the fire time.
-- No default, so adding the column rewrites nothing.
ALTER TABLE {schema}.jobs ADD COLUMN schedule text;
ALTER TABLE {schema}.jobs_archive ADD COLUMN schedule text;

-- Wake the workers' schedulers when a schedule appears, is resumed or changes its timing,
-- so that a scheduler sleeping until its next known fire looks again. Not on the cursor's
-- advance (only last_fire_at is set then): every fire would wake every worker.
CREATE FUNCTION {schema}.schedules_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', 'schedule:changed');
  RETURN NULL;
END;
$$;

CREATE TRIGGER schedules_notify
AFTER INSERT OR UPDATE OF cron, time_zone, paused ON {schema}.schedules
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.schedules_notify();
