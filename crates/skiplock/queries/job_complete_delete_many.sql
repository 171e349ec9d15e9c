-- Complete many jobs and delete the ones nobody needs kept: the worker's completer for a
-- batch of successes when WorkerConfig::delete_done is on (job_complete_many.sql otherwise).
-- A statement of its own, not a flag of job_complete_many.sql: the default completion keeps
-- its plan, and needs no right on done_deleted, whatever this one does.
--
-- $1 ids, $2 the attempts each claim returned, $3 outputs (JSON text, NULL for none); one
-- array element per job. The guard, the locks (in id order, one primary-key probe each,
-- waiting up to the statement's own lock_timeout for a row another session holds) and the
-- answer are job_complete_many.sql's: one row whose `n` holds the 1-based positions of the
-- elements written (done, or deleted); an element not in it was lost.
--
-- A job whose row is ours is deleted instead of updated to `done`, unless it must be kept:
-- an output to keep readable (W1), or a workflow member (it waits for parents, `after`, or
-- jobs wait for it, `has_children`), whose row the workflow's triggers and readers use. A
-- deletion writes no new row version and no index entry: in pgbench the claim followed by
-- this statement did 1.29x the jobs per second of the claim followed by
-- job_complete_many.sql (docs/BENCHMARKS.md, the throughput table's last column). A
-- deleted member of a sequence releases the next one as a completed one does (the table's
-- delete trigger).
--
-- The per-minute count of done jobs (queue_stats, written by the gauges' rollup from the
-- table) cannot see a deleted row: the deletions are counted here, in the same transaction,
-- in done_deleted (migration 21), one row per queue, minute and server session. A session
-- runs one transaction at a time, so no two transactions ever wait for the same count row.
-- The statement deletes the counts older than 25 hours itself (`expired`): the table needs
-- no other maintenance.
WITH o AS MATERIALIZED (
  SELECT *
  FROM unnest($1::int8[], $2::int4[], $3::text[]) WITH ORDINALITY AS o(id, attempt, output, n)
  WHERE set_config('lock_timeout', '500ms', true) IS NOT NULL
  ORDER BY id, n
), l AS MATERIALIZED (
  SELECT o.id, o.n, o.output,
         x.status = 'running'
           AND x.attempts = o.attempt -- fence
           AS ours,
         o.output IS NULL AND x.has_children IS NOT TRUE AND x.after IS NULL AS gone
  FROM o
  CROSS JOIN LATERAL (
    SELECT j.status, j.attempts, j.has_children, j.after
    FROM {schema}.jobs j
    WHERE j.id = o.id
    FOR UPDATE OF j
  ) x
), written AS (
  UPDATE {schema}.jobs j
  SET status       = 'done',
      finished_at  = now(),
      locked_until = NULL,
      output       = l.output::jsonb
  FROM l
  WHERE l.ours AND NOT l.gone
    AND j.id = l.id
  RETURNING l.n, j.queue
), deleted AS (
  DELETE FROM {schema}.jobs j
  USING l
  WHERE l.ours AND l.gone
    AND j.id = l.id
  RETURNING l.n, j.queue
), counted AS (
  INSERT INTO {schema}.done_deleted AS c (session, minute, queue, n)
  SELECT pg_backend_pid(), date_trunc('minute', now()), queue, count(*)
  FROM deleted
  GROUP BY queue
  ON CONFLICT (session, minute, queue) DO UPDATE SET n = c.n + EXCLUDED.n
), expired AS (
  -- Counts older than 25 hours (every session's), by the minute index: none most of the
  -- time, a few rows a minute while deleting workers run. A row another completion is
  -- deleting is skipped, never waited for.
  DELETE FROM {schema}.done_deleted
  WHERE ctid IN (SELECT ctid FROM {schema}.done_deleted
                 WHERE minute < now() - interval '25 hours'
                 FOR UPDATE SKIP LOCKED)
), ended AS (
  SELECT * FROM written
  UNION ALL
  SELECT * FROM deleted
), bound AS MATERIALIZED (
  SELECT q.name
  FROM {schema}.queues q
  WHERE q.name IN (SELECT DISTINCT queue FROM ended) AND q.limited AND q.limit_bound = 'slots'
), woken AS (
  SELECT pg_notify({channel}, name) FROM bound
)
SELECT coalesce(array_agg(n), '{}') AS n FROM ended
WHERE (SELECT count(*) FROM woken) >= 0
