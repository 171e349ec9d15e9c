-- skiplock migration 11: flow control. Per queue: a global concurrency limit, a per-key
-- concurrency limit and a sliding-window rate limit; per job: a key and a sequence.
--
-- The limits live in the queue's `queues` row, so every process agrees on them and they
-- change at run time. A queue with no limit is claimed exactly as before (job_claim.sql's
-- first branch, whose plan and cost are unchanged); a limited queue is claimed through
-- claim_limited() below, which serialises the claims of that queue on its `queues` row and
-- counts what runs and what started with fresh snapshots under that lock, so the database
-- never starts more than a limit allows, whatever the interleaving.
--
-- A held job (`held` not NULL) is queued but not ready: it waits for something other than
-- time (here: its turn in a sequence). Held rows are outside the ready index, so the claim
-- never walks past them, however many there are.

-- Keys and sequences: 1 to 128 bytes of letters, digits and "_.:@/-" (a tenant id, an
-- account, a host name, an e-mail address). NOT VALID: every existing row has neither, and
-- the check holds for every row written from now on without reading the table now.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
ALTER TABLE {schema}.jobs
  ADD COLUMN IF NOT EXISTS key      text,
  ADD COLUMN IF NOT EXISTS sequence text,
  ADD COLUMN IF NOT EXISTS held     text;
ALTER TABLE {schema}.jobs
  DROP CONSTRAINT IF EXISTS jobs_key_check,
  DROP CONSTRAINT IF EXISTS jobs_sequence_check,
  DROP CONSTRAINT IF EXISTS jobs_held_check,
  ADD CONSTRAINT jobs_key_check CHECK (key IS NULL OR (octet_length(key) BETWEEN 1 AND 128 AND
    ltrim(key, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@/-') = ''))
    NOT VALID,
  ADD CONSTRAINT jobs_sequence_check CHECK (sequence IS NULL OR
    (octet_length(sequence) BETWEEN 1 AND 128 AND
     ltrim(sequence, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@/-') = ''))
    NOT VALID,
  ADD CONSTRAINT jobs_held_check CHECK (held IS NULL OR held = 'sequence') NOT VALID;

-- The ready index leaves held rows out (rebuilt under the same name; on a large table the
-- build reads the table once inside this transaction, and writes wait meanwhile).
DROP INDEX IF EXISTS {schema}.jobs_ready_v11_idx;
CREATE INDEX jobs_ready_v11_idx ON {schema}.jobs (queue, priority, run_at, id)
  WHERE status = 'queued' AND held IS NULL;
DROP INDEX {schema}.jobs_ready_idx;
ALTER INDEX {schema}.jobs_ready_v11_idx RENAME TO jobs_ready_idx;

-- Held rows: found by their sequence in id order when a member finishes, and counted per
-- queue by the listings (few, and never on the claim's path).
CREATE INDEX IF NOT EXISTS jobs_held_idx ON {schema}.jobs (sequence, id) WHERE held IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_held_queue_idx ON {schema}.jobs (queue) WHERE held IS NOT NULL;

-- The active member of each sequence (queued and not held, or running): at most one.
CREATE INDEX IF NOT EXISTS jobs_sequence_idx ON {schema}.jobs (sequence)
  WHERE sequence IS NOT NULL AND held IS NULL AND status IN ('queued', 'running');

-- A limited queue's claim: the keys that have ready jobs (one index descent per key) and each
-- key's jobs in claim order; jobs without a key sit under NULL, at the end.
CREATE INDEX IF NOT EXISTS jobs_key_ready_idx ON {schema}.jobs (queue, key, priority, run_at, id)
  WHERE status = 'queued' AND held IS NULL;

-- The slots in use, per queue and key: running jobs, and cancelled jobs whose lease has not
-- ended (job_cancel.sql keeps it: their handler may still run until then). The predicate
-- names locked_until so that a query for `status = 'running'` alone (the reaper's, the
-- earliest lease's) cannot pick this index over jobs_lease_idx.
CREATE INDEX IF NOT EXISTS jobs_slots_idx ON {schema}.jobs (queue, key)
  WHERE status IN ('running', 'failed') AND locked_until IS NOT NULL;

-- The limits of a queue. NULL: no such limit.
--   concurrency     at most this many of its jobs hold a slot at once, across every process
--   per_key         at most this many jobs of one key hold a slot at once
--   rate_limit      at most this many starts ...
--   rate_period_us  ... in any interval of this many microseconds (a sliding window)
--   limit_bound     set by claim_limited(): 'slots' when its last claim left ready jobs behind
--                   for want of a slot (then a freed slot sends a notification), 'rate' when
--                   for want of room in the rate window (then workers wait for the window)
--   limits_by       who set the limits, as the caller said (free text, for operators)
--   key_cursor      the key where claim_limited()'s last walk over the keys stopped: the
--                   next claim starts after it, so keys take turns across claims
ALTER TABLE {schema}.queues
  ADD COLUMN IF NOT EXISTS concurrency    int,
  ADD COLUMN IF NOT EXISTS per_key        int,
  ADD COLUMN IF NOT EXISTS rate_limit     int,
  ADD COLUMN IF NOT EXISTS rate_period_us bigint,
  ADD COLUMN IF NOT EXISTS limit_bound    text,
  ADD COLUMN IF NOT EXISTS limits_by      text,
  ADD COLUMN IF NOT EXISTS key_cursor     text,
  ADD COLUMN IF NOT EXISTS limited        boolean GENERATED ALWAYS AS
    (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_limit IS NOT NULL) STORED,
  DROP CONSTRAINT IF EXISTS queues_concurrency_check,
  DROP CONSTRAINT IF EXISTS queues_per_key_check,
  DROP CONSTRAINT IF EXISTS queues_rate_check,
  DROP CONSTRAINT IF EXISTS queues_limit_bound_check,
  DROP CONSTRAINT IF EXISTS queues_limits_by_check,
  ADD CONSTRAINT queues_concurrency_check CHECK (concurrency BETWEEN 1 AND 1000000),
  ADD CONSTRAINT queues_per_key_check CHECK (per_key BETWEEN 1 AND 1000000),
  ADD CONSTRAINT queues_rate_check CHECK ((rate_limit IS NULL) = (rate_period_us IS NULL)
    AND rate_limit BETWEEN 1 AND 1000000 AND rate_period_us BETWEEN 1000 AND 86400000000),
  ADD CONSTRAINT queues_limit_bound_check CHECK (limit_bound IN ('slots', 'rate')),
  ADD CONSTRAINT queues_limits_by_check CHECK (octet_length(limits_by) <= 256);

-- The starts of a rate-limited queue inside its window, one row per job started. A claim
-- deletes the rows that left the window before it counts, so a queue keeps at most its
-- rate_limit rows here.
CREATE TABLE IF NOT EXISTS {schema}.queue_starts (
  queue text        NOT NULL,
  at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_starts_idx ON {schema}.queue_starts (queue, at);

-- The per-key part of claim_limited(): walks the keys of queue p_queue that have queued jobs,
-- in key order, from the first key after p_after up to p_upto (NULL: the last key), and
-- stops once the keys seen can give p_keys jobs (each as many as it has ready jobs and free
-- slots for). Each key costs three index descents: the next key (jobs_key_ready_idx), its
-- slots in use (jobs_slots_idx: running jobs, and cancelled ones whose lease has not ended,
-- counted up to p_per_key), and its ready jobs in claim order (priority, run_at, id), up to
-- its free slots plus one (the one more shows that jobs wait behind a full key). Returns
-- each job read with its key, its rank `rn` within its key (from 1), the key's place `pos`
-- in the walk, and the key's `free` slots.
CREATE OR REPLACE FUNCTION {schema}.claim_walk(p_queue text, p_after text, p_upto text,
                                               p_per_key int, p_keys bigint, ts timestamptz)
RETURNS TABLE (k text, id bigint, rn bigint, pos bigint, free bigint)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE walk(k, pos, free, ids, given) AS (
    SELECT s.k, 1::bigint, r.free, c.ids, least(greatest(r.free, 0), cardinality(c.ids))
    FROM (SELECT j.key AS k FROM {schema}.jobs j
          WHERE j.queue = p_queue AND j.status = 'queued' AND j.held IS NULL
            AND j.key > p_after AND (p_upto IS NULL OR j.key <= p_upto)
          ORDER BY j.queue, j.key
          LIMIT 1) s
    CROSS JOIN LATERAL (
      SELECT p_per_key - (SELECT count(*) FROM (
               SELECT 1 FROM {schema}.jobs u
               WHERE u.queue = p_queue AND u.key = s.k
                 AND u.status IN ('running', 'failed') AND u.locked_until IS NOT NULL
                 AND (u.status = 'running' OR u.locked_until > ts)
               LIMIT p_per_key) x) AS free
      OFFSET 0) r
    CROSS JOIN LATERAL (
      SELECT ARRAY(SELECT j.id FROM {schema}.jobs j
                   WHERE j.queue = p_queue AND j.key = s.k AND j.status = 'queued'
                     AND j.held IS NULL AND j.run_at <= ts AND j.attempts < j.max_attempts
                   ORDER BY j.queue, j.key, j.priority, j.run_at, j.id
                   LIMIT least(greatest(r.free, 0), p_keys) + 1) AS ids) c
    UNION ALL
    SELECT s.k, w.pos + 1, r.free, c.ids,
           w.given + least(greatest(r.free, 0), cardinality(c.ids))
    FROM walk w
    CROSS JOIN LATERAL (
      SELECT j.key AS k FROM {schema}.jobs j
      WHERE j.queue = p_queue AND j.status = 'queued' AND j.held IS NULL
        AND j.key > w.k AND (p_upto IS NULL OR j.key <= p_upto)
      ORDER BY j.queue, j.key
      LIMIT 1) s
    CROSS JOIN LATERAL (
      SELECT p_per_key - (SELECT count(*) FROM (
               SELECT 1 FROM {schema}.jobs u
               WHERE u.queue = p_queue AND u.key = s.k
                 AND u.status IN ('running', 'failed') AND u.locked_until IS NOT NULL
                 AND (u.status = 'running' OR u.locked_until > ts)
               LIMIT p_per_key) x) AS free
      OFFSET 0) r
    CROSS JOIN LATERAL (
      SELECT ARRAY(SELECT j.id FROM {schema}.jobs j
                   WHERE j.queue = p_queue AND j.key = s.k AND j.status = 'queued'
                     AND j.held IS NULL AND j.run_at <= ts AND j.attempts < j.max_attempts
                   ORDER BY j.queue, j.key, j.priority, j.run_at, j.id
                   LIMIT least(greatest(r.free, 0), p_keys) + 1) AS ids) c
    WHERE w.given < p_keys
  )
  SELECT w.k, t.id, t.rn, w.pos, w.free
  FROM walk w
  CROSS JOIN LATERAL unnest(w.ids) WITH ORDINALITY AS t(id, rn)
$$;

-- Claims up to p_want ready jobs of a limited queue and leases them for p_lease_us
-- microseconds; returns them as job_claim.sql does. Called by job_claim.sql only when the
-- queue's row says it is limited (and not paused).
--
-- Exact: the first statement locks the queue's row, so claims of one limited queue run one
-- at a time; every later statement takes a new snapshot (READ COMMITTED), so it sees every
-- claim that committed before this one got the lock, and every outcome that committed by
-- then. Outcomes only free slots: one this claim does not see only makes it take fewer.
-- Times come from clock_timestamp() after the lock, so the starts recorded for the rate
-- window follow the order of the claims.
--
-- Cost: the slots in use are counted up to the limit (jobs_slots_idx); the rate window's
-- rows are at most its limit; the keys are walked by a skip scan of jobs_key_ready_idx (one
-- descent per key) from where the last claim stopped, until the keys seen can give the batch,
-- and each key gives at most its free slots plus one (to learn whether more wait). Rows
-- waiting behind a full key, the rate window or a sequence are never read. Each ORDER BY
-- names the leading columns of the index it is meant to walk, so that no other index (sorted
-- afterwards) looks as cheap to a planner with stale statistics
-- (it::limits::a_full_keys_backlog_does_not_make_the_claim_dearer_with_stale_statistics).
--
-- Fairness across keys: round robin. Within a claim, every key it visits gives its first job
-- (in priority, run_at, id order) before any gives a second, and so on; within a round, keys
-- go in the order of the walk, whatever their jobs' priorities (priority orders jobs within a
-- key). Across claims, the walk goes on from the key after the last one served, so every key
-- with ready jobs and a free slot gets its turn however many jobs other keys have. A job
-- without a key is not subject to the per-key limit and counts as a key of its own (first
-- round, after the keyed jobs of that round).
CREATE OR REPLACE FUNCTION {schema}.claim_limited(p_queue text, p_want bigint, p_lease_us bigint)
RETURNS TABLE (id bigint, queue text, kind text, payload text, attempts int, max_attempts int,
               priority smallint, run_at timestamptz, created_at timestamptz,
               locked_until timestamptz)
LANGUAGE plpgsql AS $$
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
      -- each), until the keys seen can give `budget` jobs or every key with queued jobs was
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
      -- The status test runs again on the locked, latest row version.
      SELECT array_agg(l.id) INTO ids FROM (
        SELECT l.id
        FROM unnest(coalesce(ids, '{}'::bigint[])) AS c(id)
        CROSS JOIN LATERAL (
          SELECT j.id FROM {schema}.jobs j
          WHERE j.id = c.id AND j.status = 'queued' AND j.held IS NULL
            AND j.run_at <= ts AND j.attempts < j.max_attempts
          FOR UPDATE OF j SKIP LOCKED
        ) l
        LIMIT budget) l;
    END IF;

    -- Take the locked jobs: one primary-key probe each.
    RETURN QUERY
    WITH pick AS MATERIALIZED (
      SELECT c.id FROM unnest(coalesce(ids, '{}'::bigint[])) AS c(id)
    ), claimed AS (
      UPDATE {schema}.jobs j
      SET status       = 'running',
          attempts     = j.attempts + 1,
          locked_until = ts + p_lease_us * interval '1 microsecond',
          unique_key   = CASE WHEN j.unique_queued_only THEN NULL ELSE j.unique_key END
      FROM pick
      WHERE j.id = pick.id
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
  -- Why ready jobs were left behind, if they were: a full concurrency limit or key (a freed
  -- slot then notifies, see job_finish_many.sql), or a full rate window (workers then wait
  -- for it, see job_next_run_at.sql).
  bound := CASE
    WHEN key_bound OR (q.concurrency IS NOT NULL AND n >= cap AND cap < p_want) THEN 'slots'
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

-- Sequences. A job with a sequence runs only when every earlier member of its sequence has
-- reached a final state (done or failed, cancelled included); members run in id order.
--
-- At insert (the statement trigger below), each sequence named by the new rows is locked for
-- the rest of the transaction (a transaction-scoped advisory lock), then: if the sequence has
-- an active member already (queued and not held, or running), every new member is held;
-- otherwise the new member with the lowest id stays ready and the others are held. The lock
-- makes a second transaction enqueueing into the same sequence wait for the first to commit
-- or roll back, so it then sees the first's members.
--
-- When the active member reaches a final state, or is deleted, the held member with the
-- lowest id becomes ready (a notification wakes the workers of its queue). A member that
-- fails for good or is cancelled does not stop its sequence: the next one runs. A cancelled
-- member that was running may still run until its lease ends: the next member is made ready
-- no earlier than that.
CREATE OR REPLACE FUNCTION {schema}.sequence_lock(seq text) RETURNS void
LANGUAGE sql AS $$
  SELECT pg_advisory_xact_lock(hashtextextended({channel} || '/sequence/' || seq, 0))
$$;

CREATE OR REPLACE FUNCTION {schema}.sequence_release(seq text, not_before timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
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
  ORDER BY h.id LIMIT 1
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

CREATE OR REPLACE FUNCTION {schema}.jobs_sequence_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  s record;
BEGIN
  FOR s IN SELECT n.sequence AS seq, min(n.id) AS first_id
           FROM new_jobs n WHERE n.sequence IS NOT NULL
           GROUP BY n.sequence ORDER BY n.sequence
  LOOP
    PERFORM {schema}.sequence_lock(s.seq);
    UPDATE {schema}.jobs j SET held = 'sequence'
    WHERE j.sequence = s.seq AND j.id IN (SELECT n.id FROM new_jobs n WHERE n.sequence = s.seq)
      AND (j.id <> s.first_id
           OR EXISTS (SELECT 1 FROM {schema}.jobs a
                      WHERE a.sequence = s.seq AND a.held IS NULL
                        AND a.status IN ('queued', 'running')
                        AND a.id NOT IN (SELECT n.id FROM new_jobs n)));
  END LOOP;
  RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_sequence_insert ON {schema}.jobs;
CREATE TRIGGER jobs_sequence_insert
AFTER INSERT ON {schema}.jobs
REFERENCING NEW TABLE AS new_jobs
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_sequence_insert();

-- A member leaves the active state: the next one may run.
CREATE OR REPLACE FUNCTION {schema}.jobs_sequence_done() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM {schema}.sequence_release(OLD.sequence, '-infinity');
    RETURN OLD;
  END IF;
  PERFORM {schema}.sequence_release(NEW.sequence,
    CASE WHEN NEW.status = 'failed' AND NEW.locked_until > now()
         THEN NEW.locked_until ELSE '-infinity' END);
  RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS jobs_sequence_done ON {schema}.jobs;
CREATE TRIGGER jobs_sequence_done
AFTER UPDATE OF status ON {schema}.jobs
FOR EACH ROW
WHEN (OLD.sequence IS NOT NULL AND OLD.held IS NULL AND OLD.status IN ('queued', 'running')
      AND NEW.status IN ('done', 'failed'))
EXECUTE FUNCTION {schema}.jobs_sequence_done();

DROP TRIGGER IF EXISTS jobs_sequence_deleted ON {schema}.jobs;
CREATE TRIGGER jobs_sequence_deleted
AFTER DELETE ON {schema}.jobs
FOR EACH ROW
WHEN (OLD.sequence IS NOT NULL AND OLD.held IS NULL AND OLD.status IN ('queued', 'running'))
EXECUTE FUNCTION {schema}.jobs_sequence_done();

-- A finished member queued again (an operator's retry) waits for its sequence's active member.
CREATE OR REPLACE FUNCTION {schema}.jobs_sequence_requeue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM {schema}.sequence_lock(NEW.sequence);
  IF EXISTS (SELECT 1 FROM {schema}.jobs a
             WHERE a.sequence = NEW.sequence AND a.held IS NULL
               AND a.status IN ('queued', 'running') AND a.id <> NEW.id) THEN
    NEW.held := 'sequence';
  END IF;
  RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS jobs_sequence_requeue ON {schema}.jobs;
CREATE TRIGGER jobs_sequence_requeue
BEFORE UPDATE OF status ON {schema}.jobs
FOR EACH ROW
WHEN (NEW.sequence IS NOT NULL AND OLD.status IN ('done', 'failed') AND NEW.status = 'queued')
EXECUTE FUNCTION {schema}.jobs_sequence_requeue();


-- enqueue() and enqueue_unique() take a job's key and sequence (named arguments `key` and
-- `sequence`, both optional):
--
--   SELECT skiplock.enqueue('webhooks', '{"event": 7}', key => 'acct-42', sequence => 'acct-42');
--
-- The functions are migration 3's and 9's otherwise; a new argument needs a new function, so
-- the old ones are dropped (calls by position or name keep working).
DROP FUNCTION IF EXISTS {schema}.enqueue(text, jsonb, text, smallint, int, interval, timestamptz);
DROP FUNCTION IF EXISTS {schema}.enqueue_unique(text, jsonb, text, smallint, int, interval, timestamptz,
  text, boolean, text[], boolean, interval, text, boolean);

CREATE OR REPLACE FUNCTION {schema}.enqueue(
  queue        text,
  payload      jsonb,
  kind         text        DEFAULT 'default',
  priority     smallint    DEFAULT 0,
  max_attempts int         DEFAULT 5,
  delay        interval    DEFAULT NULL,
  run_at       timestamptz DEFAULT NULL,
  key          text        DEFAULT NULL,
  sequence     text        DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  new_id bigint;
BEGIN
  IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid queue name %: use 1 to 128 letters, digits, "_", "." or "-"',
      coalesce(quote_literal(left(queue, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF kind IS NULL OR kind !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid job kind %: use 1 to 128 letters, digits, "_", ".", ":" or "-"',
      coalesce(quote_literal(left(kind, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF payload IS NULL THEN
    RAISE EXCEPTION 'invalid payload: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF octet_length(payload::text) > 1048576 THEN
    RAISE EXCEPTION 'invalid payload: it is % bytes; the limit is 1048576',
      octet_length(payload::text) USING ERRCODE = '22023';
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 10000 THEN
    RAISE EXCEPTION 'invalid max_attempts %: it must be 1 to 10000',
      coalesce(max_attempts::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  IF priority IS NULL THEN
    RAISE EXCEPTION 'invalid priority: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF delay IS NOT NULL AND run_at IS NOT NULL THEN
    RAISE EXCEPTION 'give delay or run_at, not both' USING ERRCODE = '22023';
  END IF;
  IF delay IS NOT NULL AND (delay < interval '0' OR delay > interval '100 years') THEN
    RAISE EXCEPTION 'invalid delay %: it must be 0 to 100 years', delay USING ERRCODE = '22023';
  END IF;
  IF run_at IS NOT NULL AND NOT isfinite(run_at) THEN
    RAISE EXCEPTION 'invalid run_at %: it must be a finite time', run_at USING ERRCODE = '22023';
  END IF;
  IF enqueue.key IS NOT NULL AND enqueue.key !~ '^[A-Za-z0-9_.:@/-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid key %: use 1 to 128 letters, digits, "_", ".", ":", "@", "/" or "-"',
      quote_literal(left(enqueue.key, 140)) USING ERRCODE = '22023';
  END IF;
  IF enqueue.sequence IS NOT NULL AND enqueue.sequence !~ '^[A-Za-z0-9_.:@/-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid sequence %: use 1 to 128 letters, digits, "_", ".", ":", "@", "/" or "-"',
      quote_literal(left(enqueue.sequence, 140)) USING ERRCODE = '22023';
  END IF;
  INSERT INTO {schema}.jobs AS j (queue, kind, payload, priority, max_attempts, run_at,
                                   key, sequence)
  VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.priority, enqueue.max_attempts,
          coalesce(enqueue.run_at, now() + coalesce(enqueue.delay, interval '0')),
          enqueue.key, enqueue.sequence)
  RETURNING j.id INTO new_id;
  RETURN new_id;
END;
$$;

CREATE OR REPLACE FUNCTION {schema}.enqueue_unique(
  queue                text,
  payload              jsonb,
  kind                 text        DEFAULT 'default',
  priority             smallint    DEFAULT 0,
  max_attempts         int         DEFAULT 5,
  delay                interval    DEFAULT NULL,
  run_at               timestamptz DEFAULT NULL,
  unique_key           text        DEFAULT NULL,
  unique_by_args       boolean     DEFAULT false,
  unique_fields        text[]      DEFAULT NULL,
  unique_by_queue      boolean     DEFAULT false,
  unique_period        interval    DEFAULT NULL,
  on_conflict          text        DEFAULT 'skip',
  queue_behind_running boolean     DEFAULT false,
  key                  text        DEFAULT NULL,
  sequence             text        DEFAULT NULL,
  OUT id               bigint,
  OUT inserted         boolean
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  rule      text;
  period_us bigint := 0;
  k         text;
  when_due  timestamptz;
  found_id  bigint;
  found_q   text;
BEGIN
  IF enqueue_unique.queue IS NULL OR enqueue_unique.queue !~ '^[A-Za-z0-9_.-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid queue name %: use 1 to 128 letters, digits, "_", "." or "-"',
      coalesce(quote_literal(left(enqueue_unique.queue, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.kind IS NULL OR enqueue_unique.kind !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid job kind %: use 1 to 128 letters, digits, "_", ".", ":" or "-"',
      coalesce(quote_literal(left(enqueue_unique.kind, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.payload IS NULL THEN
    RAISE EXCEPTION 'invalid payload: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF octet_length(enqueue_unique.payload::text) > 1048576 THEN
    RAISE EXCEPTION 'invalid payload: it is % bytes; the limit is 1048576',
      octet_length(enqueue_unique.payload::text) USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.max_attempts IS NULL OR enqueue_unique.max_attempts < 1
     OR enqueue_unique.max_attempts > 10000 THEN
    RAISE EXCEPTION 'invalid max_attempts %: it must be 1 to 10000',
      coalesce(enqueue_unique.max_attempts::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.priority IS NULL THEN
    RAISE EXCEPTION 'invalid priority: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.delay IS NOT NULL AND enqueue_unique.run_at IS NOT NULL THEN
    RAISE EXCEPTION 'give delay or run_at, not both' USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.delay IS NOT NULL
     AND (enqueue_unique.delay < interval '0' OR enqueue_unique.delay > interval '100 years') THEN
    RAISE EXCEPTION 'invalid delay %: it must be 0 to 100 years', enqueue_unique.delay
      USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.run_at IS NOT NULL AND NOT isfinite(enqueue_unique.run_at) THEN
    RAISE EXCEPTION 'invalid run_at %: it must be a finite time', enqueue_unique.run_at
      USING ERRCODE = '22023';
  END IF;
  IF (enqueue_unique.unique_key IS NOT NULL)::int + coalesce(enqueue_unique.unique_by_args, false)::int
     + (enqueue_unique.unique_fields IS NOT NULL)::int <> 1 THEN
    RAISE EXCEPTION 'give exactly one of unique_key, unique_by_args, unique_fields'
      USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.unique_key IS NOT NULL
     AND (octet_length(enqueue_unique.unique_key) NOT BETWEEN 1 AND 1024) THEN
    RAISE EXCEPTION 'invalid unique_key: it must be 1 to 1024 bytes' USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.unique_fields IS NOT NULL
     AND (cardinality(enqueue_unique.unique_fields) NOT BETWEEN 1 AND 64
          OR array_position(enqueue_unique.unique_fields, NULL) IS NOT NULL) THEN
    RAISE EXCEPTION 'invalid unique_fields: give 1 to 64 field names, none NULL'
      USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.unique_period IS NOT NULL THEN
    IF enqueue_unique.unique_period < interval '1 second'
       OR enqueue_unique.unique_period > interval '100 years' THEN
      RAISE EXCEPTION 'invalid unique_period %: it must be 1 second to 100 years',
        enqueue_unique.unique_period USING ERRCODE = '22023';
    END IF;
    period_us := (extract(epoch FROM enqueue_unique.unique_period) * 1000000)::bigint;
  END IF;
  IF enqueue_unique.on_conflict IS NULL
     OR enqueue_unique.on_conflict NOT IN ('skip', 'replace', 'keep_run_at') THEN
    RAISE EXCEPTION 'invalid on_conflict %: use skip, replace or keep_run_at',
      coalesce(quote_literal(left(enqueue_unique.on_conflict, 40)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.key IS NOT NULL AND enqueue_unique.key !~ '^[A-Za-z0-9_.:@/-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid key %: use 1 to 128 letters, digits, "_", ".", ":", "@", "/" or "-"',
      quote_literal(left(enqueue_unique.key, 140)) USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.sequence IS NOT NULL
     AND enqueue_unique.sequence !~ '^[A-Za-z0-9_.:@/-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid sequence %: use 1 to 128 letters, digits, "_", ".", ":", "@", "/" or "-"',
      quote_literal(left(enqueue_unique.sequence, 140)) USING ERRCODE = '22023';
  END IF;
  rule := CASE WHEN enqueue_unique.unique_key IS NOT NULL THEN 'key'
               WHEN enqueue_unique.unique_by_args THEN 'args'
               ELSE 'fields' END;
  k := {schema}.unique_key(rule, enqueue_unique.kind,
         CASE WHEN enqueue_unique.unique_by_queue THEN enqueue_unique.queue END,
         enqueue_unique.payload, enqueue_unique.unique_fields, enqueue_unique.unique_key,
         period_us);
  when_due := coalesce(enqueue_unique.run_at, now() + coalesce(enqueue_unique.delay, interval '0'));
  -- Insert, or learn the active duplicate. Each statement sees what committed before it
  -- began (READ COMMITTED), so a duplicate that finished in between is tried again.
  FOR round IN 1..10 LOOP
    INSERT INTO {schema}.jobs AS j
      (queue, kind, payload, priority, max_attempts, run_at, unique_key, unique_queued_only,
       key, sequence)
    VALUES (enqueue_unique.queue, enqueue_unique.kind, enqueue_unique.payload,
            enqueue_unique.priority, enqueue_unique.max_attempts, when_due, k,
            coalesce(enqueue_unique.queue_behind_running, false),
            enqueue_unique.key, enqueue_unique.sequence)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
    DO NOTHING
    RETURNING j.id INTO found_id;
    IF found_id IS NOT NULL THEN
      id := found_id;
      inserted := true;
      RETURN;
    END IF;
    IF enqueue_unique.on_conflict <> 'skip' THEN
      UPDATE {schema}.jobs AS j
      SET payload = enqueue_unique.payload,
          run_at  = CASE WHEN enqueue_unique.on_conflict = 'replace'
                         THEN greatest(when_due, j.locked_until) ELSE j.run_at END
      WHERE j.unique_key = k AND j.status = 'queued'
      RETURNING j.id, j.queue INTO found_id, found_q;
      IF found_id IS NOT NULL THEN
        -- Its run_at may have moved earlier: wake that queue's workers (at commit).
        PERFORM pg_notify({channel}, found_q);
        id := found_id;
        inserted := false;
        RETURN;
      END IF;
    END IF;
    SELECT j.id INTO found_id FROM {schema}.jobs AS j
    WHERE j.unique_key = k AND j.status IN ('queued', 'running');
    IF found_id IS NOT NULL THEN
      id := found_id;
      inserted := false;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'the active duplicate of unique key % kept finishing; try again', k
    USING ERRCODE = '40001';
END;
$$;

-- The new columns have no statistics yet: without them the planner takes `held IS NOT NULL`
-- for nearly every row until the next autoanalyze. A sample of the table, once.
ANALYZE {schema}.jobs (key, sequence, held);

-- Whoever may use the jobs table may use the rate window's table (the claim writes it).
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
    EXECUTE format('GRANT %s ON {schema}.queue_starts TO %s', g.privilege, g.grantee);
  END LOOP;
END
$$;
