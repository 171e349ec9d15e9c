-- The vacuum service's VACUUM of the jobs table (see worker/vacuum.rs). Sent on its own in
-- autocommit: VACUUM cannot run in a transaction block. SKIP_LOCKED: when another VACUUM (an
-- autovacuum worker, another process) holds the table, skip it instead of queueing behind it
-- with the lock held up for everyone's DDL; the next round tries again. No ANALYZE: the
-- planner's statistics are autovacuum's business, and the claim's plan does not depend on
-- them (the partial ready index). Bounded by the session's statement_timeout.
VACUUM (SKIP_LOCKED) {schema}.jobs
