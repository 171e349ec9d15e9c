-- Whether this transaction may run a scheduler round: one round at a time across all
-- processes (the others try again a tick later). Transaction-scoped, so no session state
-- (works through PgBouncer in transaction mode). $1 the lock key. Correctness does not
-- rest on it: the cursor's compare-and-set (schedule_fire.sql) keeps racing rounds from
-- firing twice; the lock only keeps them from doing the same work at once.
SELECT pg_try_advisory_xact_lock($1::int8)
