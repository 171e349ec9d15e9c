-- The turn of a claim in turn, waited for (migration 24): opens the claim's transaction and
-- locks the queue's turn, `claim_turn_{turn}` ({turn}: `skiplock::claim_turn` of the queue),
-- waiting for the claim in turn that holds it to commit. The worker sends it, then
-- job_claim.sql, then job_claim_turn_end.sql (COMMIT), in one round trip, after
-- job_claim_turn_try.sql found the turn taken; the claim then takes up to
-- `WorkerConfig::max_claim_batch_waited` jobs instead of `max_claim_batch` (migration 19):
-- the turn's fixed cost is paid less often while several workers queue for it.
--
-- LOCK takes no snapshot (a SELECT that waits for a lock holds one, and with it the index
-- entries of every row claimed meanwhile: see migration 24); the claim's snapshot is taken
-- once the turn has come, after the claims ahead of it committed, so it finds their rows
-- gone from the ready set instead of stepping past them.
--
-- The turn is waited for 2 s at most (turns take milliseconds: one claim each). A claim
-- whose turn does not come by then (the holder's session stuck sending its rows to a
-- vanished client, say) fails here with lock_not_available, and the worker claims with
-- job_claim.sql alone, its own batch. After the LOCK the claim runs with the session's
-- lock_timeout (`TO DEFAULT`: the connection's own setting), and COMMIT restores the rest.
BEGIN;
SET LOCAL lock_timeout = '2s';
LOCK TABLE {schema}.claim_turn_{turn} IN EXCLUSIVE MODE;
SET LOCAL lock_timeout TO DEFAULT
