-- skiplock migration 14: workers that register, the history of failed attempts, and a
-- per-queue, per-minute rollup. Read by the dashboard and by `skiplock workers`.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.

-- One row per running Worker (a process may run several): registered at start, kept current
-- by the worker's presence heartbeat, marked stopped at a clean shutdown. Rows stopped or
-- silent for more than 24 hours are deleted by the next worker that registers.
CREATE TABLE IF NOT EXISTS {schema}.workers (
  id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  host        text        NOT NULL,   -- gethostname(), as the operating system gives it
  pid         int         NOT NULL,
  queues      jsonb       NOT NULL,   -- {"emails": 4, "default": 10}: queue -> concurrency
  concurrency int         NOT NULL,   -- total slots
  running     int         NOT NULL DEFAULT 0,  -- jobs running at the last heartbeat
  poll_off    boolean     NOT NULL,   -- true: writes nothing while idle (shown "sleeping", never "gone" for silence)
  heartbeat   interval    NOT NULL,   -- its own stated presence interval: gone when silent longer than this (plus grace)
  version     text        NOT NULL,   -- skiplock crate version
  started_at  timestamptz NOT NULL DEFAULT now(),
  last_seen   timestamptz NOT NULL DEFAULT now(),
  stopped_at  timestamptz             -- clean shutdown
);

-- Attempt history: a bounded list (the last 20) of failed attempts per job, newest last:
-- [{"attempt": 2, "at": "<timestamptz>", "error": "text", "ran_ms": 1234}, ...]
-- "at" is when the attempt ended; ran_ms how long it ran (now() - attempted_at). Written
-- only by failure/retry/reap paths, never by a completion, in the statement that records
-- the failure.
ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS errors jsonb;
ALTER TABLE {schema}.jobs_archive ADD COLUMN IF NOT EXISTS errors jsonb;

-- When the current (or last) attempt started: set by every claim, in the UPDATE that already
-- rewrites the row (status, attempts and locked_until change there anyway), so it costs the
-- claim one timestamp and no extra write. The lease cannot tell it: the heartbeat moves
-- locked_until on.
ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS attempted_at timestamptz;
ALTER TABLE {schema}.jobs_archive ADD COLUMN IF NOT EXISTS attempted_at timestamptz;

-- A per-queue, per-minute rollup written by the elected gauges service (never by the hot
-- path), kept for 25 hours: the dashboard's throughput and depth charts.
CREATE TABLE IF NOT EXISTS {schema}.queue_stats (
  queue     text        NOT NULL,
  minute    timestamptz NOT NULL,   -- date_trunc('minute', ...)
  done      bigint      NOT NULL DEFAULT 0,  -- jobs that reached done in this minute
  failed    bigint      NOT NULL DEFAULT 0,  -- jobs that reached failed in this minute
  available bigint      NOT NULL DEFAULT 0,  -- ready now, at the last sample in this minute
  scheduled bigint      NOT NULL DEFAULT 0,  -- queued with run_at in the future (includes retrying)
  running   bigint      NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, minute)
);
-- The pruning of rows older than 25 hours, and reads of every queue since a time.
CREATE INDEX IF NOT EXISTS queue_stats_minute_idx ON {schema}.queue_stats (minute);

-- Whoever may use the jobs table may use these (workers register as that role).
DO $$
DECLARE
  g record;
BEGIN
  FOR g IN
    SELECT a.privilege_type AS privilege,
           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee
    FROM pg_class c
    CROSS JOIN LATERAL aclexplode(c.relacl) a
    WHERE c.oid = '{schema}.jobs'::regclass
      AND a.grantee <> c.relowner
      AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
  LOOP
    EXECUTE format('GRANT %s ON {schema}.workers TO %s', g.privilege, g.grantee);
    EXECUTE format('GRANT %s ON {schema}.queue_stats TO %s', g.privilege, g.grantee);
  END LOOP;
END
$$;

-- claim_limited() as in migration 12, and it sets attempted_at as job_claim.sql does.
CREATE OR REPLACE FUNCTION {schema}.claim_limited(p_queue text, p_want bigint, p_lease_us bigint)
RETURNS TABLE (id bigint, queue text, kind text, payload text, attempts int, max_attempts int,
               priority smallint, run_at timestamptz, created_at timestamptz,
               locked_until timestamptz)
LANGUAGE plpgsql
-- Plans that hold whatever the table's size was when they were made. PL/pgSQL keeps a
-- statement's plan for the session, and after five calls PostgreSQL may keep a generic one:
-- made while the queue's table was small, it read the whole table on every claim once the
-- table had grown (migration 11 did; the test
-- it::limits::a_full_keys_backlog_does_not_make_the_claim_dearer_with_stale_statistics
-- makes ten claims on a small table first). Every statement here has one right plan, an
-- index walk in the order its ORDER BY names or one primary-key probe per id, so the planner
-- is kept to index scans and nested loops, and keeps that plan (no planning per call). And
-- no JIT compilation: the walk's estimated cost grows with the table (a recursive walk of
-- unknown length), and past jit_above_cost every claim spent some 30 ms compiling a plan
-- that runs in one.
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
  q         {schema}.queues%ROWTYPE;
  ts        timestamptz;
  budget    bigint := p_want;
  cap       bigint;
  started   bigint;
  ids       bigint[];
  key_bound boolean := false;
  bound     text;
  n         bigint;
  -- The per-key walk.
  new_cursor text;
  seen       bigint := 0;
  c_ids      bigint[] := '{}';
  c_rn       bigint[] := '{}';
  c_pos      bigint[] := '{}';
  last_pos   bigint := 0;
BEGIN
  SELECT * INTO q FROM {schema}.queues qq WHERE qq.name = p_queue FOR UPDATE;
  IF NOT FOUND OR q.paused OR NOT q.limited THEN
    RETURN;
  END IF;
  ts := clock_timestamp();
  IF q.concurrency IS NOT NULL THEN
    SELECT q.concurrency - count(*) INTO cap FROM (
      SELECT 1 FROM {schema}.jobs s
      WHERE s.queue = p_queue
        AND s.status IN ('running', 'failed') AND s.locked_until IS NOT NULL
        AND (s.status = 'running' OR s.locked_until > ts)
      LIMIT q.concurrency) c;
    budget := least(budget, cap);
  END IF;
  IF q.rate_limit IS NOT NULL THEN
    DELETE FROM {schema}.queue_starts s
    WHERE s.queue = p_queue AND s.at <= ts - q.rate_period_us * interval '1 microsecond';
    SELECT count(*) INTO started FROM {schema}.queue_starts s WHERE s.queue = p_queue;
    budget := least(budget, q.rate_limit - started);
  END IF;

  IF budget > 0 THEN
    IF q.per_key IS NULL THEN
      -- As job_claim.sql: the ready index in claim order, each row locked as it is read,
      -- skipping any another session holds.
      SELECT array_agg(r.id) INTO ids FROM (
        SELECT j.id FROM {schema}.jobs j
        WHERE j.queue = p_queue AND j.status = 'queued' AND j.held IS NULL
          AND j.run_at <= ts AND j.attempts < j.max_attempts
        ORDER BY j.queue, j.priority, j.run_at, j.id
        LIMIT budget
        FOR UPDATE OF j SKIP LOCKED) r;
    ELSE
      -- Keys in turn, from the key after the queue's cursor (where the last claim stopped) to
      -- the last key, then from the first key up to the cursor (claim_walk(), one statement
      -- each), until the keys seen can give `budget` jobs or every key with ready jobs was
      -- visited.
      SELECT coalesce(array_agg(w.id) FILTER (WHERE w.rn <= w.free), '{}'),
             coalesce(array_agg(w.rn) FILTER (WHERE w.rn <= w.free), '{}'),
             coalesce(array_agg(w.pos) FILTER (WHERE w.rn <= w.free), '{}'),
             coalesce(bool_or(w.rn > w.free), false),
             count(*) FILTER (WHERE w.rn <= w.free),
             max(w.k) FILTER (WHERE w.rn <= w.free),
             coalesce(max(w.pos), 0)
      INTO c_ids, c_rn, c_pos, key_bound, seen, new_cursor, last_pos
      FROM {schema}.claim_walk(p_queue, coalesce(q.key_cursor, ''), NULL, q.per_key, budget, ts) w;
      IF seen < budget AND q.key_cursor IS NOT NULL THEN
        SELECT c_ids || coalesce(array_agg(w.id) FILTER (WHERE w.rn <= w.free), '{}'),
               c_rn || coalesce(array_agg(w.rn) FILTER (WHERE w.rn <= w.free), '{}'),
               c_pos || coalesce(array_agg(last_pos + w.pos) FILTER (WHERE w.rn <= w.free), '{}'),
               key_bound OR coalesce(bool_or(w.rn > w.free), false),
               coalesce(max(w.k) FILTER (WHERE w.rn <= w.free), new_cursor)
        INTO c_ids, c_rn, c_pos, key_bound, new_cursor
        FROM {schema}.claim_walk(p_queue, '', q.key_cursor, q.per_key, budget - seen, ts) w;
      END IF;
      -- Round robin: every key's first job, then every key's second, and so on, keys in the
      -- order of the walk; jobs without a key count as keys of their own, after the keyed
      -- ones in the first round.
      SELECT array_agg(x.id ORDER BY x.rn, x.pos, x.sub) INTO ids FROM (
        SELECT c.id, c.rn, c.pos, 0::bigint AS sub
        FROM unnest(c_ids, c_rn, c_pos) AS c(id, rn, pos)
        UNION ALL
        SELECT u.id, 1, 9223372036854775807, u.sub
        FROM (SELECT j.id, row_number() OVER () AS sub
              FROM (SELECT j.id FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.key IS NULL AND j.status = 'queued'
                      AND j.held IS NULL AND j.run_at <= ts AND j.attempts < j.max_attempts
                    ORDER BY j.queue, j.key, j.priority, j.run_at, j.id
                    LIMIT budget) j) u
      ) x;
      -- Lock the candidates in their order, skipping any another session holds (an
      -- operator's cancel, say): one primary-key probe each, and no more than the budget.
      -- The status test runs again on the locked, latest row version. (It is written as one
      -- IS TRUE test so that it implies no partial index's predicate: the primary key is the
      -- only index left, whatever the planner thinks of the table's size. PostgreSQL 13
      -- otherwise took jobs_key_ready_idx, whose predicate the test matches, and read all of
      -- it for each candidate.)
      SELECT array_agg(l.id) INTO ids FROM (
        SELECT l.id
        FROM unnest(coalesce(ids, '{}'::bigint[])) AS c(id)
        CROSS JOIN LATERAL (
          SELECT j.id FROM {schema}.jobs j
          WHERE j.id = c.id
            AND (j.status = 'queued' AND j.held IS NULL
                 AND j.run_at <= ts AND j.attempts < j.max_attempts) IS TRUE
          FOR UPDATE OF j SKIP LOCKED
        ) l
        LIMIT budget) l;
    END IF;

    -- Take the locked jobs: one primary-key probe each.
    RETURN QUERY
    WITH claimed AS (
      UPDATE {schema}.jobs j
      SET status       = 'running',
          attempts     = j.attempts + 1,
          locked_until = ts + p_lease_us * interval '1 microsecond',
          attempted_at = ts,
          unique_key   = CASE WHEN j.unique_queued_only THEN NULL ELSE j.unique_key END
      WHERE j.id = ANY (coalesce(ids, '{}'::bigint[]))
      RETURNING j.id, j.queue, j.kind, j.payload::text, j.attempts, j.max_attempts,
                j.priority, j.run_at, j.created_at, j.locked_until
    )
    SELECT * FROM claimed;
    GET DIAGNOSTICS n = ROW_COUNT;
  ELSE
    n := 0;
  END IF;

  IF q.rate_limit IS NOT NULL AND n > 0 THEN
    INSERT INTO {schema}.queue_starts (queue, at) SELECT p_queue, ts FROM generate_series(1, n);
  END IF;
  -- Why the claim came back short, if it did: a full concurrency limit or full keys (a freed
  -- slot then notifies, see job_finish_many.sql), or a full rate window (workers then wait
  -- for it, see job_next_run_at.sql). A claim that got all it asked for is not bound, even if
  -- it passed over full keys: its worker claims again at once, and outcomes send nothing.
  bound := CASE
    WHEN (key_bound AND n < p_want)
         OR (q.concurrency IS NOT NULL AND n >= cap AND cap < p_want) THEN 'slots'
    WHEN q.rate_limit IS NOT NULL AND n >= q.rate_limit - started AND n < p_want THEN 'rate'
  END;
  -- Becoming bound for want of a slot: an outcome that freed one while this claim ran read
  -- the row before this commits and sent nothing, so wake the queue's workers once (at
  -- commit): they claim again and see every slot freed before then. Later outcomes see the
  -- mark and notify (job_finish_many.sql, job_reap.sql). Staying bound sends nothing.
  IF bound = 'slots' AND q.limit_bound IS DISTINCT FROM 'slots' THEN
    PERFORM pg_notify({channel}, p_queue);
  END IF;
  new_cursor := coalesce(new_cursor, q.key_cursor);
  IF q.limit_bound IS DISTINCT FROM bound OR q.key_cursor IS DISTINCT FROM new_cursor THEN
    UPDATE {schema}.queues qq SET limit_bound = bound, key_cursor = new_cursor
    WHERE qq.name = p_queue;
  END IF;
END;
$$;
