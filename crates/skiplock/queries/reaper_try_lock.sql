-- Whether this transaction may reap now: only one reaper across all processes at a time
-- (others skip this round). Transaction-scoped, so no session state. $1 the lock key.
--
-- The round's transaction also gets an idle-in-transaction timeout of 5 s (SET LOCAL, so
-- this transaction only; it works through PgBouncer in transaction mode): a worker cut off
-- from the server in the middle of a round (a partition, a half-open connection) would
-- otherwise hold the lock, and so stop every other process's reaper, until the session's
-- own timeout (60 s by default) or the server's TCP keepalive ends it.
SELECT pg_try_advisory_xact_lock($1::int8)
FROM (SELECT set_config('idle_in_transaction_session_timeout', '5000', true)) AS short_idle
