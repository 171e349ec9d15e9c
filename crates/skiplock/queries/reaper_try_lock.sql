-- Whether this transaction may reap now: only one reaper across all processes at a time
-- (others skip this round). Transaction-scoped, so no session state. $1 the lock key.
SELECT pg_try_advisory_xact_lock($1::int8)
