-- skiplock migration 2: the archive table for pruning, and maintenance locks.

-- Finished jobs moved out of the hot table by `prune --archive` (same columns, plus when they
-- were archived). No identity, defaults or checks: rows arrive as they were.
CREATE TABLE {schema}.jobs_archive (
  id           bigint      PRIMARY KEY,
  queue        text        NOT NULL,
  payload      jsonb       NOT NULL,
  status       text        NOT NULL,
  run_at       timestamptz NOT NULL,
  attempts     int         NOT NULL,
  max_attempts int         NOT NULL,
  locked_until timestamptz,
  last_error   text,
  created_at   timestamptz NOT NULL,
  kind         text        NOT NULL,
  priority     smallint    NOT NULL,
  finished_at  timestamptz,
  archived_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per maintenance task that must run in one process at a time (pruning). A holder
-- keeps it until it releases it or until it expires, so a crashed holder cannot block the
-- task forever. Rows, not session advisory locks, so that it works through PgBouncer in
-- transaction mode.
CREATE TABLE {schema}.maintenance_locks (
  name       text        PRIMARY KEY,
  holder     text        NOT NULL,
  expires_at timestamptz NOT NULL
);
