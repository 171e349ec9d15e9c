-- Claim up to $2 ready jobs of queue $1 and lease them for $3 microseconds.
--
-- The CTE is an optimisation fence: the planner cannot turn it into a nested loop that
-- updates more rows than the LIMIT. FOR UPDATE locks each chosen row; SKIP LOCKED makes a
-- concurrent claimer step past rows another claimer holds instead of waiting for its
-- transaction (FOR UPDATE alone serialises claimers) or re-reading a row it already took
-- (the naive `WHERE id = (SELECT ... LIMIT 1)` double-runs jobs: see `skiplock lab`).
--
-- `attempts` grows here, at the claim: it is the fencing token every later write of this
-- job checks. `attempts < max_attempts` skips a hand-made row that could never run (and
-- keeps `attempts + 1` from overflowing), so one bad row cannot break the claim.
--
-- Runs as its own short autocommit statement: no transaction stays open while jobs run.
--
-- Nothing is claimed from a paused queue (a row of `queues`, see `Client::pause_queue`). The
-- test does not depend on the job row, so it runs once per claim, before the scan (an
-- InitPlan under a one-time filter): a paused queue costs one primary-key probe and no index
-- scan, and the claim's plan and cost are otherwise unchanged. A claim whose snapshot was
-- taken before the pause committed may still take jobs; none that starts after it does.
--
-- A queue with a limit (concurrency, per key or rate: migration 11) is claimed by the second
-- branch instead, {schema}.claim_limited(), which counts slots and starts under the queue's
-- row lock. Both branches test the queue's row once per claim (one-time filters): exactly
-- one of them runs, and an unlimited queue's claim has the plan and cost it had before.
-- Held jobs (waiting for their turn in a sequence) are outside the ready index.
--
-- ($4, $5, $6) is where the scan starts: only jobs whose (priority, run_at, id) comes after
-- it. A claim from the front passes the least key (-32768, NULL for -infinity, the least
-- int8), which every row is after; the worker passes the last key it claimed while a claim from the front
-- has become slow (a held snapshot keeps the index entries of every job claimed since it
-- began, and the scan walks them all), and claims from the front again at least once a
-- second (`worker::position`). The bound is a range of the ready index, not a filter.
--
-- The UPDATE finds the rows it locked by their ids, through the primary key (`id =
-- ANY(ARRAY(...))`: one index scan, the ids in order), whatever the batch and whatever the
-- table's statistics say (migration 23). Joined to `next` instead, the planner chose for a
-- batch that is large beside the table (a claim of 2,000 after a wait on a table of
-- 100,000 jobs, or any batch under a generic plan, which guesses the LIMIT) a hash join
-- over a sequential scan of the whole table: every claim read every row, and two claims at
-- once took as long as one after the other
-- (it::plans::the_claim_reaches_its_rows_by_primary_key_whatever_the_batch).
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
