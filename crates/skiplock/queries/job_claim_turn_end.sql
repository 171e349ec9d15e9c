-- The end of a claim in turn (migration 24): commits its transaction, which releases the
-- turn. After a failed turn or claim, COMMIT rolls the transaction back instead.
COMMIT
