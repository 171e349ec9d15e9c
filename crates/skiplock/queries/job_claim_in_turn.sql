-- Claim up to $2 ready jobs of queue $1, leased for $3 microseconds, after ($4, $5, $6):
-- job_claim.sql itself, run by {schema}.claim_in_turn() (migration 16) after it takes the
-- queue's advisory lock, so that the claims of several workers working through one queue's
-- backlog take turns on its front instead of stepping past each other's rows. The lock is
-- transaction-scoped and this statement runs in autocommit: it is held for this statement
-- only. The worker claims this way while its last claim came back full
-- (`WorkerConfig::claim_in_turn`).
SELECT * FROM {schema}.claim_in_turn($1, $2, $3, $4, $5, $6)
