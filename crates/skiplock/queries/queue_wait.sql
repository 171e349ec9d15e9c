-- Start waiting on queue $1 from the LISTEN connection (migration 15): try, without
-- blocking, the session-level shared lock of each of the queue's stripes that this session
-- does not hold yet ($2, the ones it holds). One row per stripe tried, with whether it was
-- taken: a stripe not taken is held by an INSERT that sent no notification and has not yet
-- committed; try it again shortly. Once every stripe is held, every later INSERT into the
-- queue notifies, and a claim started after that sees every job that did not.
-- The key and the stripe count are those of jobs_waiting_key() and jobs_waiting_stripes()
-- written out, so that a LISTEN connection needs no privilege on the schema (as LISTEN
-- needs none); it::wakeups checks them against the functions.
SELECT s AS stripe,
       pg_try_advisory_lock_shared(
         hashtextextended({channel} || '/waiting/' || $1 || '/' || s, 0)) AS taken
FROM generate_series(0, 7) AS s
WHERE s <> ALL($2::int4[])
ORDER BY s
