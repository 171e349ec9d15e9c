-- skiplock migration 16: claims that take turns on a queue's front.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: several worker processes working through one queue's backlog each keep a claim out,
-- and concurrent claims on the same front step past each other's rows: a claim that starts
-- while others are out locks and skips (SKIP LOCKED) every row they hold, and follows the
-- rows they just took to their new versions. Measured on two cores (100,000 no-op jobs,
-- eight `skiplock work` processes of concurrency 25): eight claims out at once, each
-- fetching three times the rows one process's claim fetches per job, and the server
-- spending 45-48 us of CPU per job against 26-28 for one process of 200.
--
-- claim_in_turn() is job_claim.sql behind a transaction-scoped advisory lock per queue
-- (jobs_claim_key): claims of one queue that come through it run one at a time, in the
-- order they asked, each with a snapshot taken after the one before it committed (a
-- VOLATILE PL/pgSQL function takes a fresh snapshot for each statement it runs), so it
-- finds the rows its predecessor took already gone from the ready set instead of stepping
-- past them. The lock lasts one statement (the claim runs in autocommit): a worker that
-- dies mid-claim holds no one up beyond that statement, and a claim waits 2 s at most for its
-- turn, then claims without it. The worker claims through it only
-- while it works through a backlog (its last claim came back full) and
-- `WorkerConfig::claim_in_turn` is on (the default). Short claims, a worker's first one and
-- `Client::claim` run job_claim.sql directly, without the lock: they step past the rows of a
-- claim in turn as every claim did before, and nothing waits for them.
--
-- The claim itself is job_claim.sql's statement, run with EXECUTE (planned for its
-- parameters at each call, as the worker's unprepared statement is): the same plan, the
-- same parameters $1-$6, the same rows. The test it::claim::claim_in_turn_runs_job_claim_sql
-- checks that the text below is job_claim.sql's.

-- The advisory-lock key of a queue's claims in turn: the same text as the keys of migration
-- 15 use, with '/claim/', so the two never meet.
CREATE OR REPLACE FUNCTION {schema}.jobs_claim_key(p_queue text)
RETURNS int8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT hashtextextended({channel} || '/claim/' || p_queue, 0)
$$;

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
  USING p_queue, p_want, p_lease_us, p_priority, p_run_at, p_id;
END
$fn$;
