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
WITH next AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE queue = $1
    AND status = 'queued'
    AND run_at <= now()
    AND attempts < max_attempts
  ORDER BY priority, run_at, id
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs j
SET status       = 'running',
    attempts     = j.attempts + 1,
    locked_until = now() + $3::int8 * interval '1 microsecond',
    -- A job whose uniqueness rule lets a new job queue behind it while it runs gives up
    -- its key as it starts (migration 6); every other job keeps its key.
    unique_key   = CASE WHEN j.unique_queued_only THEN NULL ELSE j.unique_key END
FROM next
WHERE j.id = next.id
RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.priority, j.run_at, j.created_at, j.locked_until
