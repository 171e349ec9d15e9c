-- skiplock migration 26: a lighter per-key claim.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- claim_limited() as in migration 14 but for its last steps on a per-key-limited queue,
-- which run one claim at a time under the queue's row lock: every microsecond there is paid
-- for every claim of the queue. After the walk (claim_walk(), migration 25) it ordered the
-- candidates round robin (an aggregate sorted by turn), locked them one primary-key probe
-- at a time in that order (a nested loop, LIMIT the budget), then updated them by primary
-- key: three statements. Now, when every candidate fits the budget and none is a job
-- without a key (the common case: the walk gives no more than the budget), the order among
-- them decides nothing, so there is no sort, and the candidates are locked (skipping any
-- another session holds, and tested again on their latest row version) and updated by one
-- statement: one primary-key index scan for the whole array, as job_claim.sql does for an
-- unlimited queue. Otherwise (jobs without a key, or more candidates than the budget) the
-- round-robin order and the lock in that order stay as they were, and so does the update
-- of the rows already locked, as on a queue with no per-key limit. Same rows, same guards.
--
-- Measured on two cores (pg_stat_statements, the claim statement's own time, 50,000 no-op
-- jobs over 1,000 keys, per-key limit 2, concurrency 200, claims of about 485): 8.32-8.74 ms
-- a claim in six drains against 9.27-9.62 ms in three before it (the same drains' keyed
-- claims without limits took 7.19-8.21 ms); inside one drain each, the sort, the lock step
-- and the update took 0.33 + 0.82 + 4.00 ms before and the one statement 4.80 ms after.
--
-- Tested by it::limits::a_limited_claim_skips_a_job_another_session_holds (both ways of
-- locking skip a job another session holds, and take it once it is free; negative control:
-- without SKIP LOCKED in the new statement the claim waited for the other session), and by
-- the rest of it::limits through the worker's own claim (the limit exact under load, keys
-- in turn, plans that hold with stale statistics and a grown table).

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
  free_ids   bigint[];
  -- Whether the candidates in ids are locked already (else the statement that takes them
  -- locks them).
  locked_now boolean := true;
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
      -- Jobs without a key: keys of their own, after the keyed ones in the first round.
      SELECT array_agg(j.id) INTO free_ids FROM (
        SELECT j.id FROM {schema}.jobs j
        WHERE j.queue = p_queue AND j.key IS NULL AND j.status = 'queued'
          AND j.held IS NULL AND j.run_at <= ts AND j.attempts < j.max_attempts
        ORDER BY j.queue, j.key, j.priority, j.run_at, j.id
        LIMIT budget) j;
      IF free_ids IS NULL AND cardinality(c_ids) <= budget THEN
        -- Every candidate fits: no order to keep among them.
        ids := c_ids;
        locked_now := false;
      ELSE
        -- Round robin: every key's first job, then every key's second, and so on, keys in
        -- the order of the walk; jobs without a key count as keys of their own, after the
        -- keyed ones in the first round.
        SELECT array_agg(x.id ORDER BY x.rn, x.pos, x.sub) INTO ids FROM (
          SELECT c.id, c.rn, c.pos, 0::bigint AS sub
          FROM unnest(c_ids, c_rn, c_pos) AS c(id, rn, pos)
          UNION ALL
          SELECT u.id, 1, 9223372036854775807, u.sub
          FROM unnest(coalesce(free_ids, '{}'::bigint[])) WITH ORDINALITY AS u(id, sub)
        ) x;
        -- Lock the candidates in their order, skipping any another session holds (an
        -- operator's cancel, say): one primary-key probe each, and no more than the budget.
        -- The status test runs again on the locked, latest row version. (It is written as
        -- one IS TRUE test so that it implies no partial index's predicate: the primary key
        -- is the only index left, whatever the planner thinks of the table's size.
        -- PostgreSQL 13 otherwise took jobs_key_ready_idx, whose predicate the test
        -- matches, and read all of it for each candidate.)
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
    END IF;

    IF locked_now THEN
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
    ELSE
      -- Lock the candidates, skipping any another session holds, the status test run again
      -- on the locked, latest row version (one IS TRUE test, as above), and take them: one
      -- primary-key index scan for the whole array, then one probe each.
      RETURN QUERY
      WITH locked AS MATERIALIZED (
        SELECT j.id FROM {schema}.jobs j
        WHERE j.id = ANY (coalesce(ids, '{}'::bigint[]))
          AND (j.status = 'queued' AND j.held IS NULL
               AND j.run_at <= ts AND j.attempts < j.max_attempts) IS TRUE
        FOR UPDATE OF j SKIP LOCKED
      ), claimed AS (
        UPDATE {schema}.jobs j
        SET status       = 'running',
            attempts     = j.attempts + 1,
            locked_until = ts + p_lease_us * interval '1 microsecond',
            attempted_at = ts,
            unique_key   = CASE WHEN j.unique_queued_only THEN NULL ELSE j.unique_key END
        WHERE j.id = ANY (ARRAY(SELECT l.id FROM locked l))
        RETURNING j.id, j.queue, j.kind, j.payload::text, j.attempts, j.max_attempts,
                  j.priority, j.run_at, j.created_at, j.locked_until
      )
      SELECT * FROM claimed;
    END IF;
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
