-- Complete many jobs in one statement: the worker's completer for the common case, a batch
-- whose outcomes are all successes (any other outcome goes through job_finish_many.sql).
--
-- $1 ids, $2 the attempts each claim returned, $3 outputs (JSON text, NULL for none); one
-- array element per job. The guard is job_finish_many.sql's: the row is still running at
-- the attempt its claim returned (the fencing token), checked on the locked, latest row
-- version (the row as locked), in a materialized CTE: the UPDATE then joins only on id.
-- Returns one row, whatever the batch: `n`, the 1-based positions of the elements written
-- (each now `done`), in no particular order. An element not in it was lost: the job is no
-- longer this claim's. One array instead of a row per element: a batch of 1,000 costs the
-- server one result row to form and send, and the worker one value to decode (the rows
-- cost the worker about a tenth of its CPU per job).
--
-- Locks: the input is sorted by id and each element locks its row with one primary-key
-- probe (a LATERAL subquery by id only, so that no partial index on status can be picked
-- for it: one probe per element whatever the statistics say), waiting
-- for a row another session holds instead of skipping it. The sessions that hold a
-- running job's row are short: a claim whose scan met the row while it was still queued in
-- its snapshot keeps it locked until that claim commits (the lock PostgreSQL takes before
-- it re-checks the row and finds it running), the reaper, a heartbeat, an operator's cancel
-- or retry. Claims, the reaper and heartbeats never wait for a row (SKIP LOCKED), and cancel
-- and retry lock in id order as this does: no deadlock. Waiting leaves no row `busy` to be
-- written again, which job_finish_many.sql's SKIP LOCKED probe reports for each row a
-- concurrent claim's scan happened to hold. The wait is bounded: the statement sets its own
-- lock_timeout (for its own transaction only, before it locks anything: `o` is sorted, so
-- every element has passed the filter before the first lock), and a row held longer than
-- that (another session's open transaction) fails the statement with lock_not_available
-- (55P03); the worker then writes the batch through job_finish_many.sql, which writes the
-- other rows and reports the held one busy.
--
-- A job that other jobs wait for (migration 13) makes them ready in this statement (the
-- table's triggers, as for job_finish_many.sql). A limited queue whose last claim left ready
-- jobs behind for want of a slot gets one notification: a slot freed (see
-- job_finish_many.sql). A line ending in `-- fence` is the attempt part of the guard.
WITH o AS MATERIALIZED (
  SELECT *
  FROM unnest($1::int8[], $2::int4[], $3::text[]) WITH ORDINALITY AS o(id, attempt, output, n)
  WHERE set_config('lock_timeout', '500ms', true) IS NOT NULL
  ORDER BY id, n
), l AS MATERIALIZED (
  SELECT o.id, o.n, o.output,
         x.status = 'running'
           AND x.attempts = o.attempt -- fence
           AS ours
  FROM o
  CROSS JOIN LATERAL (
    SELECT j.status, j.attempts
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
  WHERE l.ours
    AND j.id = l.id
  RETURNING l.n, j.queue
), bound AS MATERIALIZED (
  SELECT q.name
  FROM {schema}.queues q
  WHERE q.name IN (SELECT DISTINCT queue FROM written) AND q.limited AND q.limit_bound = 'slots'
), woken AS (
  SELECT pg_notify({channel}, name) FROM bound
)
SELECT coalesce(array_agg(n), '{}') AS n FROM written
WHERE (SELECT count(*) FROM woken) >= 0
