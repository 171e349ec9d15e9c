-- skiplock migration 12: a cheaper key walk for per-key limits (keys compared byte by byte,
-- two index descents a key instead of four, plans kept), no wake-ups while a per-key queue's
-- claims get all they ask for, and sequences whose members are enqueued in big batches.
--
-- claim_walk() (migration 11) spent four index descents on each key it visited: one to find
-- the next key, one to count its slots in use, and two (the same subquery, planned twice) to
-- read its ready jobs. This one spends two: one descent of jobs_key_ready_idx finds the next
-- key and reads its first jobs in claim order in the same scan, and one descent of
-- jobs_slots_idx counts the key's slots in use. Same arguments, same result columns, same
-- promises: keys in key order from the one after p_after, up to p_upto (NULL: the last key),
-- stopping once the keys seen can give p_keys jobs; each key gives its ready jobs in claim
-- order (priority, run_at, id), at most its free slots plus one (the one more shows that jobs
-- wait behind a full key); `rn` is a job's rank within its key (from 1), `pos` the key's
-- place in the walk, `free` its free slots (negative when a limit was lowered below what
-- runs).
--
-- What one key costs: the scan reads at most 3 rows and keeps those of the first key it
-- meets (a key with fewer jobs lets the scan read a row or two of the next key, which the
-- next step reads again; the LIMIT is a constant, so that the plan does not depend on it).
-- The scan does not test run_at in the index: a B-tree reads the rest of the index page it
-- lands on, and testing a fourth column on every entry of it was a seventh of the walk. It
-- tests run_at on the rows it returns instead: when one of the key's first rows is not due
-- yet (a job scheduled for later, at the head of its key in claim order), or when the key has
-- 3 or more free slots and 3 or more jobs, one more descent reads the key's due jobs, up to
-- its share.
-- A full key costs one short scan and one count, however many due jobs wait behind it.

-- Keys compare byte by byte (collation "C"). A key is ASCII letters, digits and "_.:@/-"
-- (jobs_key_check), so no language's rules could order keys better; and the walk below
-- compares a key with its neighbours in the key index on every row of each index page it
-- reads, where a language collation costs several times a byte comparison (about 15% of
-- the walk on a "C.UTF-8" database, more on others). The column's two indexes are rebuilt;
-- the table is not rewritten. Skipped when the column is "C" already.
DO $$
BEGIN
  IF (SELECT a.attcollation FROM pg_attribute a
      WHERE a.attrelid = '{schema}.jobs'::regclass AND a.attname = 'key')
     IS DISTINCT FROM '"C"'::regcollation THEN
    ALTER TABLE {schema}.jobs ALTER COLUMN key TYPE text COLLATE "C";
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION {schema}.claim_walk(p_queue text, p_after text, p_upto text,
                                               p_per_key int, p_keys bigint, ts timestamptz)
RETURNS TABLE (k text, id bigint, rn bigint, pos bigint, free bigint)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE walk(k, pos, free, ids, given) AS (
    -- A seed that gives nothing: the walk starts after p_after.
    SELECT p_after COLLATE "C", 0::bigint, 0::bigint, '{}'::bigint[], 0::bigint
    UNION ALL
    SELECT s.k, w.pos + 1, s.free, s.ids,
           w.given + least(greatest(s.free, 0), cardinality(s.ids))
    FROM walk w
    CROSS JOIN LATERAL (
      SELECT h.k, h.free,
             CASE WHEN NOT h.all_ready OR (h.n = 3 AND least(h.free, p_keys) >= 3) THEN
               ARRAY(SELECT j.id FROM {schema}.jobs j
                     WHERE j.queue = p_queue AND j.key = h.k AND j.status = 'queued'
                       AND j.held IS NULL AND j.run_at <= ts AND j.attempts < j.max_attempts
                     ORDER BY j.queue, j.key, j.priority, j.run_at, j.id
                     LIMIT least(greatest(h.free, 0), p_keys) + 1)
             ELSE h.ids[1:least(greatest(h.free, 0), p_keys) + 1] END AS ids
      FROM (
        SELECT f.k, f.ids, f.n, f.all_ready,
               p_per_key - (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.jobs u
                 WHERE u.queue = p_queue AND u.key = f.k
                   AND u.status IN ('running', 'failed') AND u.locked_until IS NOT NULL
                   AND (u.status = 'running' OR u.locked_until > ts)
                 LIMIT p_per_key) x) AS free
        FROM (
          SELECT min(x.k1) AS k,
                 array_agg(x.id ORDER BY x.o) FILTER (WHERE x.k = x.k1) AS ids,
                 count(*) FILTER (WHERE x.k = x.k1) AS n,
                 bool_and(x.ready) FILTER (WHERE x.k = x.k1) AS all_ready
          FROM (
            SELECT j.key AS k, j.id, j.ready,
                   row_number() OVER () AS o, first_value(j.key) OVER () AS k1
            FROM (SELECT j.key, j.id, j.run_at <= ts AS ready FROM {schema}.jobs j
                  WHERE j.queue = p_queue AND j.status = 'queued' AND j.held IS NULL
                    AND j.key > w.k AND (p_upto IS NULL OR j.key <= p_upto)
                    AND j.attempts < j.max_attempts
                  ORDER BY j.queue, j.key, j.priority, j.run_at, j.id
                  LIMIT 3) j
          ) x
        ) f
        WHERE f.k IS NOT NULL
        OFFSET 0
      ) h
    ) s
    WHERE w.given < p_keys
  )
  SELECT w.k, t.id, t.rn, w.pos, w.free
  FROM walk w
  CROSS JOIN LATERAL unnest(w.ids) WITH ORDINALITY AS t(id, rn)
$$;

-- claim_limited() as in migration 11 but for two things. Its statements keep plans that do
-- not depend on the table's size (the SET clauses below). And a claim that passed over full keys
-- but still got every job it asked for no longer marks its queue bound for want of a slot:
-- its worker claims again at once anyway (a full claim means more may be ready), so the
-- notification every outcome of the queue sent while the mark stood woke workers for
-- nothing. A claim that comes back short because keys are full marks the queue as before,
-- and outcomes then wake it.
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

-- Sequences (migration 11) enqueued in big batches. The insert trigger of migration 11 held
-- every new member but the first, and then looked for an active member of the sequence that
-- was not among the new rows with `id NOT IN (the new rows)`: once the batch no longer fit in
-- work_mem that test ran row by row, so a batch of 100,000 members of one sequence compared
-- every pair and did not finish. Now a member is held as it is inserted (a row trigger that
-- fires only for rows with a sequence), and the statement trigger then releases, for each
-- sequence the statement touched, the held member with the lowest id if the sequence has no
-- active member: one lock and a few index probes per sequence, whatever the batch.
CREATE OR REPLACE FUNCTION {schema}.jobs_sequence_hold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.held := 'sequence';
  RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS jobs_sequence_hold ON {schema}.jobs;
CREATE TRIGGER jobs_sequence_hold
BEFORE INSERT ON {schema}.jobs
FOR EACH ROW
WHEN (NEW.sequence IS NOT NULL AND NEW.held IS NULL)
EXECUTE FUNCTION {schema}.jobs_sequence_hold();

-- Sequences in name order, so that two transactions enqueueing into the same sequences take
-- their locks in the same order.
CREATE OR REPLACE FUNCTION {schema}.jobs_sequence_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  s record;
BEGIN
  FOR s IN SELECT DISTINCT n.sequence AS seq FROM new_jobs n
           WHERE n.sequence IS NOT NULL ORDER BY 1
  LOOP
    PERFORM {schema}.sequence_release(s.seq, '-infinity');
  END LOOP;
  RETURN NULL;
END;
$$;

-- sequence_release() as in migration 11, but the next member is found in (sequence, id)
-- order, which only jobs_held_idx gives: in id order alone, the primary key could be walked
-- from the start of the table instead.
CREATE OR REPLACE FUNCTION {schema}.sequence_release(seq text, not_before timestamptz) RETURNS void
LANGUAGE plpgsql
SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  next_id bigint;
  next_q  text;
BEGIN
  PERFORM {schema}.sequence_lock(seq);
  IF EXISTS (SELECT 1 FROM {schema}.jobs a
             WHERE a.sequence = seq AND a.held IS NULL AND a.status IN ('queued', 'running')) THEN
    RETURN;
  END IF;
  SELECT h.id INTO next_id FROM {schema}.jobs h
  WHERE h.sequence = seq AND h.held IS NOT NULL AND h.status = 'queued'
  ORDER BY h.sequence, h.id LIMIT 1
  FOR UPDATE;
  IF next_id IS NULL THEN
    RETURN;
  END IF;
  UPDATE {schema}.jobs j
  SET held = NULL,
      run_at = CASE WHEN not_before > j.run_at THEN not_before ELSE j.run_at END
  WHERE j.id = next_id
  RETURNING j.queue INTO next_q;
  PERFORM pg_notify({channel}, next_q);
END;
$$;

-- The other functions that read the jobs table (the sequence functions, and enqueue_unique()
-- for SQL callers) keep index plans whatever the table's size when their plans were made,
-- and are never JIT-compiled (see claim_limited() above): PL/pgSQL keeps their plans for the
-- session too.
ALTER FUNCTION {schema}.jobs_sequence_requeue()
  SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
  SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION {schema}.enqueue_unique(text, jsonb, text, smallint, integer, interval,
                                       timestamptz, text, boolean, text[], boolean, interval,
                                       text, boolean, text, text)
  SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
  SET enable_hashjoin = off SET enable_mergejoin = off;
