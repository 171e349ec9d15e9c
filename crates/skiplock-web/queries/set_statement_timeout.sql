-- The statement timeout of the dashboard's transaction ($1, e.g. '3000ms'), and no JIT
-- compilation in it: SET LOCAL, written as set_config(..., true) so that the value can be
-- bound. Both end with the transaction, so a pooled connection goes back to the pool with its
-- own settings (and it works through PgBouncer in transaction mode). JIT is off because a
-- page's statements are short bounded reads whose cost estimates can still pass
-- jit_above_cost on a large table (the queues page's counts on ten million finished jobs),
-- and compiling them would take longer than running them.
SELECT set_config('statement_timeout', $1, true), set_config('jit', 'off', true)
