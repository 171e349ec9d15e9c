-- skiplock migration 15: an INSERT notifies a queue only while some session waits on it.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: PostgreSQL serialises the commits of every transaction that sent a notification
-- (a database-wide lock on the notification queue, held through the commit's WAL flush),
-- so single-row enqueues from many connections went no faster than from one. Busy workers
-- need no wake-up: they claim again as soon as they have room, and only stop after a claim
-- finds nothing. So an INSERT notifies a queue only while a session waits on it.
--
-- How, without losing a wake-up: a session that waits on a queue holds a session-level
-- shared advisory lock on each of the queue's eight stripes (jobs_waiting_key), taken
-- before its last claim. An INSERT tries the exclusive lock of one stripe (its backend's
-- pid modulo eight) for the rest of its transaction: if it gets it, nobody waits, and any
-- session that starts waiting later gets that stripe only after this transaction commits,
-- so the claim it makes next sees the job; if it does not get it, it notifies as before.
-- A session waits with jobs_wait (blocking) or, as the worker does, with non-blocking
-- tries (queue_wait.sql); jobs_unwait (queue_unwait.sql) stops waiting.

-- The advisory-lock key of one stripe of a queue's waiters (the stripe count is
-- jobs_waiting_stripes()). The same text as the sequence keys of migration 11 use, with
-- '/waiting/' in place of '/sequence/', so the two never meet.
CREATE OR REPLACE FUNCTION {schema}.jobs_waiting_key(p_queue text, p_stripe int)
RETURNS int8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT hashtextextended({channel} || '/waiting/' || p_queue || '/' || p_stripe, 0)
$$;

-- How many stripes a waiting session holds: one per backend pid modulo this.
CREATE OR REPLACE FUNCTION {schema}.jobs_waiting_stripes()
RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 8 $$;

-- Wait on a queue, for a session of its own that LISTENs (not through a transaction
-- pooler): blocks until every INSERT that skipped its notification has committed, then
-- every later INSERT into the queue notifies while this session holds the locks. Claim once
-- more after it returns (jobs committed before it returned sent no notification). Call it
-- once per queue; jobs_unwait undoes it.
CREATE OR REPLACE FUNCTION {schema}.jobs_wait(p_queue text)
RETURNS void LANGUAGE sql AS $$
  SELECT pg_advisory_lock_shared({schema}.jobs_waiting_key(p_queue, s))
  FROM generate_series(0, {schema}.jobs_waiting_stripes() - 1) AS s
$$;

CREATE OR REPLACE FUNCTION {schema}.jobs_unwait(p_queue text)
RETURNS void LANGUAGE sql AS $$
  SELECT pg_advisory_unlock_shared({schema}.jobs_waiting_key(p_queue, s))
  FROM generate_series(0, {schema}.jobs_waiting_stripes() - 1) AS s
$$;

-- Wake-up hint: one pg_notify per distinct queue per INSERT statement, never per row, and
-- never the payload, and only for a queue that some session waits on (see above). The
-- channel is '<schema>.jobs' so that schemas do not wake each other. Notifications are
-- delivered only when the inserting transaction commits.
CREATE OR REPLACE FUNCTION {schema}.jobs_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(TG_TABLE_SCHEMA || '.jobs', q.queue)
  FROM (SELECT DISTINCT queue FROM new_jobs) AS q
  WHERE NOT pg_try_advisory_xact_lock(
    {schema}.jobs_waiting_key(q.queue, pg_backend_pid() % {schema}.jobs_waiting_stripes()));
  RETURN NULL;
END;
$$;
