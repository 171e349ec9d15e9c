-- The flow scenario's application tables, beside the queue's in the run's schema:
--   effects     one row per effect a flow handler committed (the work the queue must run
--               exactly once); no uniqueness on job_id, so that a duplicate shows up instead
--               of being refused
--   violations  what a handler found wrong when it ran (a parent not done, parents missing)
CREATE TABLE IF NOT EXISTS torture.effects (
  job_id  bigint      NOT NULL,
  attempt int         NOT NULL,
  at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS effects_job_id ON torture.effects (job_id);
CREATE TABLE IF NOT EXISTS torture.violations (
  job_id  bigint      NOT NULL,
  attempt int         NOT NULL,
  detail  text        NOT NULL,
  at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
