-- skiplock migration 19: a claim that waited for its turn takes a larger batch.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: while several worker processes work through one queue's backlog, their claims take
-- turns (migration 16) and the turn is the one step that runs one at a time. Each turn has
-- a fixed cost besides its rows (the commit, and handing the lock to the next session, which
-- waits for a core on a busy machine): measured on two cores while eight `skiplock work`
-- processes of concurrency 25 drained 100,000 no-op jobs, a claim of 500 held the turn for
-- 7.4 ms and the turn passed to the next claim 2.1 ms after it ended, with six or seven
-- claims waiting at almost every moment. A claim that had to wait for its turn now takes up
-- to p_want_waited rows instead of p_want (the worker passes
-- `WorkerConfig::max_claim_batch_waited`, four times its batch by default: 2,000, and holds
-- room for that many), so that a queue's claims pay the turn's fixed cost less often exactly
-- when they queue for it. The same drains, four interleaved rounds: waiting claims of up to
-- 1,000 50,500-53,100 jobs/s, of up to 2,000 56,300-57,100, one process of 200
-- 59,100-64,000 (every claim of 500, in earlier rounds of the same sitting: eight processes
-- 44,800-48,600). A claim that found the turn free (one process, or the first of several) takes
-- p_want, as before: it waits for nobody, and a larger batch would only hold more jobs
-- claimed ahead of its slots.
--
-- The turn is first tried without waiting (pg_try_advisory_xact_lock): a claim that gets it
-- at once runs no subtransaction and sets no lock_timeout. One that does not waits for it
-- as migration 16's does (2 s at most, then claims without it, with p_want).
--
-- The six-argument claim_in_turn() of migration 16 stays, for workers of the previous
-- version during an upgrade. The claim is job_claim.sql's statement, as there (the test
-- it::claim::claim_in_turn_runs_job_claim_sql checks both functions' text against it).

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
FROM next
WHERE j.id = next.id
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
