-- Whether this transaction may run a scheduler round: one round at a time across all
-- processes (the others try again a tick later). Transaction-scoped, so no session state
-- (works through PgBouncer in transaction mode). $1 the lock key. Correctness does not
-- rest on it: the cursor's compare-and-set (schedule_fire.sql) keeps racing rounds from
-- firing twice; the lock only keeps them from doing the same work at once. As for the
-- reaper's lock (reaper_try_lock.sql), the round's transaction gets an idle-in-transaction
-- timeout of 5 s, so that a process cut off mid-round does not hold the lock for long.
SELECT pg_try_advisory_xact_lock($1::int8)
FROM (SELECT set_config('idle_in_transaction_session_timeout', '5000', true)) AS short_idle
