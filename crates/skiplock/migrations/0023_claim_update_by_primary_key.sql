-- skiplock migration 23: a claim's UPDATE finds its rows through the primary key.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: job_claim.sql's UPDATE joined the rows it had locked (`FROM next WHERE j.id =
-- next.id`), and the planner chose the join by comparing the batch with the table. For a
-- batch that is large beside the table (a claim in turn that waited takes up to 2,000: on a
-- table of 100,000 jobs), and for any batch under a generic plan (named prepared
-- statements, which guess the LIMIT), it chose a hash join over a sequential scan of the
-- whole table: every such claim read every row of the table, and claims from two sessions
-- at once took as long as one after the other. Measured with pgbench on two cores (claims
-- of 500 only, `-M prepared`, two clients, a fresh table of 100,000 jobs per run, four
-- alternating pairs): 64,697-82,515 jobs/s joined, 98,913-136,277 through the primary key.
-- Now the UPDATE reads `WHERE j.id = ANY (ARRAY(SELECT id FROM next))`: one scan of the
-- primary key for the batch's ids, whatever the batch and the statistics
-- (it::plans::the_claim_reaches_its_rows_by_primary_key_whatever_the_batch). Same rows, same
-- locks (taken by `next`), same results; the worker sorts a claim's rows into claim order,
-- as it did.
--
-- Both claim_in_turn() functions (migration 16's six-argument one, kept for workers of an
-- older version during an upgrade, and migration 19's) run job_claim.sql's statement, and
-- are replaced with the new text (it::claim::claim_in_turn_runs_job_claim_sql checks both
-- against job_claim.sql).

CREATE OR REPLACE FUNCTION {schema}.claim_in_turn(p_queue text, p_want int8, p_lease_us int8,
                                                  p_priority int2, p_run_at timestamptz,
                                                  p_id int8)
RETURNS TABLE (id bigint, queue text, kind text, payload text, attempts int, max_attempts int,
               priority smallint, run_at timestamptz, created_at timestamptz,
               locked_until timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  session_lock_timeout text := current_setting('lock_timeout');
BEGIN
  -- The turn is waited for 2 s at most (turns take milliseconds: one claim each): a claim
  -- whose turn does not come by then (the holder's session stuck sending its rows to a
  -- vanished client, say) claims without it, as job_claim.sql does, instead of failing.
  PERFORM set_config('lock_timeout', '2s', true);
  BEGIN
    PERFORM pg_advisory_xact_lock({schema}.jobs_claim_key(p_queue));
  EXCEPTION WHEN lock_not_available THEN
    NULL;
  END;
  PERFORM set_config('lock_timeout', session_lock_timeout, true);
  RETURN QUERY EXECUTE $claim$
WITH next AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE queue = $1
    AND status = 'queued'
    AND held IS NULL
    AND run_at <= now()
    AND attempts < max_attempts
    AND (priority, run_at, id) > ($4::int2, coalesce($5::timestamptz, '-infinity'), $6::int8)
    AND NOT EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND (q.paused OR q.limited))
  ORDER BY priority, run_at, id
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), claimed AS (
UPDATE {schema}.jobs j
SET status       = 'running',
    attempts     = j.attempts + 1,
    locked_until = now() + $3::int8 * interval '1 microsecond',
    attempted_at = now(),
    -- A job whose uniqueness rule lets a new job queue behind it while it runs gives up
    -- its key as it starts (migration 6); every other job keeps its key.
    unique_key   = CASE WHEN j.unique_queued_only THEN NULL ELSE j.unique_key END
WHERE j.id = ANY (ARRAY(SELECT id FROM next))
RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.priority, j.run_at, j.created_at, j.locked_until
)
SELECT * FROM claimed
UNION ALL
SELECT * FROM {schema}.claim_limited($1, $2, $3)
WHERE EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND q.limited AND NOT q.paused)
$claim$
  USING p_queue, p_want, p_lease_us, p_priority, p_run_at, p_id;
END
$fn$;

CREATE OR REPLACE FUNCTION {schema}.claim_in_turn(p_queue text, p_want int8, p_lease_us int8,
                                                  p_priority int2, p_run_at timestamptz,
                                                  p_id int8, p_want_waited int8)
RETURNS TABLE (id bigint, queue text, kind text, payload text, attempts int, max_attempts int,
               priority smallint, run_at timestamptz, created_at timestamptz,
               locked_until timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  session_lock_timeout text;
  want int8 := p_want;
BEGIN
  IF NOT pg_try_advisory_xact_lock({schema}.jobs_claim_key(p_queue)) THEN
    -- Another session's claim holds the turn: wait for it, 2 s at most (turns take
    -- milliseconds); a claim whose turn does not come by then (the holder's session stuck
    -- sending its rows to a vanished client, say) claims without it, its own batch, instead
    -- of failing.
    session_lock_timeout := current_setting('lock_timeout');
    PERFORM set_config('lock_timeout', '2s', true);
    BEGIN
      PERFORM pg_advisory_xact_lock({schema}.jobs_claim_key(p_queue));
      want := greatest(p_want, coalesce(p_want_waited, p_want));
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
    PERFORM set_config('lock_timeout', session_lock_timeout, true);
  END IF;
  RETURN QUERY EXECUTE $claim$
WITH next AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE queue = $1
    AND status = 'queued'
    AND held IS NULL
    AND run_at <= now()
    AND attempts < max_attempts
    AND (priority, run_at, id) > ($4::int2, coalesce($5::timestamptz, '-infinity'), $6::int8)
    AND NOT EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND (q.paused OR q.limited))
  ORDER BY priority, run_at, id
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), claimed AS (
UPDATE {schema}.jobs j
SET status       = 'running',
    attempts     = j.attempts + 1,
    locked_until = now() + $3::int8 * interval '1 microsecond',
    attempted_at = now(),
    -- A job whose uniqueness rule lets a new job queue behind it while it runs gives up
    -- its key as it starts (migration 6); every other job keeps its key.
    unique_key   = CASE WHEN j.unique_queued_only THEN NULL ELSE j.unique_key END
WHERE j.id = ANY (ARRAY(SELECT id FROM next))
RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.priority, j.run_at, j.created_at, j.locked_until
)
SELECT * FROM claimed
UNION ALL
SELECT * FROM {schema}.claim_limited($1, $2, $3)
WHERE EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND q.limited AND NOT q.paused)
$claim$
  USING p_queue, want, p_lease_us, p_priority, p_run_at, p_id;
END
$fn$;
