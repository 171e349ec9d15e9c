-- The turn of a claim in turn, tried (migration 24): opens the claim's transaction and locks
-- the queue's turn, `claim_turn_{turn}` ({turn}: `skiplock::claim_turn` of the queue),
-- without waiting. The worker sends it, then job_claim.sql, then job_claim_turn_end.sql
-- (COMMIT), in one round trip. If another session's claim in turn holds the turn, it fails
-- with lock_not_available (and so does the claim behind it, in the failed transaction,
-- which COMMIT then rolls back): the worker then waits for the turn with
-- job_claim_in_turn.sql and claims its larger batch.
BEGIN;
LOCK TABLE {schema}.claim_turn_{turn} IN EXCLUSIVE MODE NOWAIT
