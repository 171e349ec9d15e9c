-- skiplock migration 1: the jobs table, its ready index and the insert notification.
--
-- `{schema}` is replaced by the validated, quoted schema name before this file runs.
-- The whole file runs inside one transaction that holds the migration advisory lock.

-- The article's table, column for column, plus:
--   kind        routes a job to its handler (any string; 'default' for plain SQL inserts)
--   priority    lower runs first; part of the claim order and of the ready index
--   finished_at set when a job reaches `done` or `failed` (pruning and statistics use it)
CREATE TABLE {schema}.jobs (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default',
  payload      jsonb       NOT NULL,
  status       text        NOT NULL DEFAULT 'queued'
               CHECK (status IN ('queued', 'running', 'done', 'failed')),
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int         NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 5,
  locked_until timestamptz,
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  kind         text        NOT NULL DEFAULT 'default',
  priority     smallint    NOT NULL DEFAULT 0,
  finished_at  timestamptz,
  -- Bounds that keep one bad row from breaking the claim for everyone:
  -- `attempts` only grows (it is the fencing token) and never goes negative,
  -- and a job must be allowed at least one attempt.
  CONSTRAINT jobs_attempts_check     CHECK (attempts >= 0),
  CONSTRAINT jobs_max_attempts_check CHECK (max_attempts >= 1),
  -- Names as the library and enqueue() allow them: 1 to 128 characters from [A-Za-z0-9_.-]
  -- (and ':' in kinds). ltrim with the allowed set, not a regular expression: checked on
  -- every inserted row, and several times cheaper, which batch inserts feel.
  CONSTRAINT jobs_queue_check        CHECK (octet_length(queue) BETWEEN 1 AND 128 AND
    ltrim(queue, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
  CONSTRAINT jobs_kind_check         CHECK (octet_length(kind) BETWEEN 1 AND 128 AND
    ltrim(kind, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-') = '')
);

-- The ready index: only rows a claimer looks for, in exactly the claim order.
-- It stays small however many finished jobs the table keeps.
CREATE INDEX jobs_ready_idx ON {schema}.jobs (queue, priority, run_at, id)
  WHERE status = 'queued';

-- The reaper looks for expired leases among running jobs only.
CREATE INDEX jobs_lease_idx ON {schema}.jobs (locked_until)
  WHERE status = 'running';

-- Wake-up hint: one pg_notify per distinct queue per INSERT statement, never per row,
-- and never the payload. The channel is '<schema>.jobs' so that schemas do not wake each
-- other. Notifications are delivered only when the inserting transaction commits.
CREATE FUNCTION {schema}.jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', q.queue)
  FROM (SELECT DISTINCT queue FROM new_jobs) AS q;
  RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify_insert
AFTER INSERT ON {schema}.jobs
REFERENCING NEW TABLE AS new_jobs
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_notify_insert();
