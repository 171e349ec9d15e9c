-- The statement timeout of the dashboard's transaction ($1, e.g. '3000ms'): SET LOCAL, written
-- as set_config(..., true) so that the value can be bound. It ends with the transaction, so a
-- pooled connection goes back to the pool with its own setting (and it works through
-- PgBouncer in transaction mode).
SELECT set_config('statement_timeout', $1, true)
