-- skiplock migration 13: job results and dependencies between jobs (workflows).
--
-- New columns of jobs, all NULL for a plain job (adding them rewrites nothing):
--   output        what the job's handler returned (JSON), written with its completion
--   after         the ids of the jobs it waits for (its parents), sorted, no duplicates
--   waiting       how many of them are not done yet (counted under their row locks)
--   has_children  true once another job waits for this one
--
-- A job that waits for a parent that is not done is held (`held = 'after'`): queued but
-- outside every ready index, so waiting jobs are never in a claim's way, however many there
-- are. The edges live in job_deps (parent, child), one row per pair, `satisfied` once the
-- parent is done; jobs.after keeps the parents of each child.
--
-- Everything happens in triggers on the jobs table, so that every path that writes a job
-- (the worker's outcome statement, a completion inside the handler's own transaction, the
-- reaper, cancel, retry, delete, prune, a hand-written UPDATE) keeps the graph right, in the
-- same transaction as the parent's change. The triggers fire only for rows that take part
-- in a workflow, and only for the changes they handle (their WHEN clauses test the new
-- columns and the status change): a plain job's insert, claim and outcome run no trigger
-- function, and neither does the claim of a child or of a parent.
--
-- The race the design closes: a child is inserted while its parent completes. The insert
-- locks each parent (FOR SHARE, in id order) and counts the parents not yet done on their
-- latest row versions. A parent's completion locks its row first (the outcome statement's
-- FOR UPDATE, or the UPDATE's own lock), so one of the two waits for the other: either the
-- child sees the parent done (and never waits for it), or the parent's trigger, whose
-- statements each take a fresh snapshot (READ COMMITTED), sees the child's committed edge
-- and releases it. Two parents of one child completing at once both decrement the child's
-- count under its row lock (the second waits for the first and reads the new count).

ALTER TABLE {schema}.jobs
  ADD COLUMN IF NOT EXISTS output       jsonb,
  ADD COLUMN IF NOT EXISTS after        bigint[],
  ADD COLUMN IF NOT EXISTS waiting      int,
  ADD COLUMN IF NOT EXISTS has_children boolean;

ALTER TABLE {schema}.jobs
  DROP CONSTRAINT IF EXISTS jobs_held_check,
  ADD CONSTRAINT jobs_held_check CHECK (held IS NULL OR held IN ('sequence', 'after')) NOT VALID;

-- Archived jobs keep their output and the jobs they waited for.
ALTER TABLE {schema}.jobs_archive
  ADD COLUMN IF NOT EXISTS output jsonb,
  ADD COLUMN IF NOT EXISTS after  bigint[];

CREATE TABLE IF NOT EXISTS {schema}.job_deps (
  parent    bigint  NOT NULL,
  child     bigint  NOT NULL,
  satisfied boolean NOT NULL DEFAULT false,
  PRIMARY KEY (parent, child)
);

-- Ends the jobs that wait, directly or through others, for `root` (which failed, was
-- cancelled or is being deleted): each becomes `failed` with a last_error naming the job it
-- waited for. Only waiting jobs (queued and held for their parents) change; the walk follows
-- unsatisfied edges only, which lead to waiting jobs alone. One statement for the whole
-- descent (a recursive query), and the triggers of the jobs it ends do not walk again.
CREATE OR REPLACE FUNCTION {schema}.flow_fail(root bigint, how text) RETURNS void
LANGUAGE plpgsql
-- Index plans whatever the statistics say: a trigger's statements run once per row of a
-- statement that may insert thousands, against a table whose statistics may predate them
-- (a sequential scan chosen for a small table would make a big insert quadratic), and
-- nested loops over the edges' primary key (a hash join would read every edge at each
-- level of a recursive walk down a chain).
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
  prior text := current_setting('skiplock.settling', true);
BEGIN
  PERFORM set_config('skiplock.settling', 'on', true);
  WITH RECURSIVE d(id, via) AS (
    SELECT e.child, e.parent FROM {schema}.job_deps e
    WHERE e.parent = root AND NOT e.satisfied
    UNION
    SELECT e.child, e.parent FROM d JOIN {schema}.job_deps e ON e.parent = d.id
    WHERE NOT e.satisfied
  ), t AS (
    -- In id order: the UPDATE below probes (and locks) the rows in this order.
    SELECT id, min(via) AS via FROM d GROUP BY id ORDER BY id
  )
  UPDATE {schema}.jobs j
  SET status      = 'failed',
      finished_at = now(),
      last_error  = format('job %s, which this job waits for, %s', t.via,
                           CASE WHEN t.via = root THEN how ELSE 'failed' END)
  FROM t
  WHERE j.id = t.id
    AND j.status = 'queued'
    AND j.held = 'after';
  PERFORM set_config('skiplock.settling', coalesce(prior, ''), true);
END;
$$;

-- Locks the parents `ids` (sorted, no duplicates) one by one in id order, marking each as a
-- parent on the way (an exclusive lock the first time, a share lock after that), and counts
-- those not done. A parent that does not exist or has failed is refused. One order for
-- every locker: a parent's id is always below its children's (a child is enqueued after
-- its parents, or after them in the same workflow), and a completion locks the parent, then
-- its children, so the two never wait for each other in a circle.
CREATE OR REPLACE FUNCTION {schema}.flow_lock_parents(ids bigint[], OUT open int, OUT done bigint[])
LANGUAGE plpgsql
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
  p  bigint;
  st text;
BEGIN
  open := 0;
  done := '{}';
  FOREACH p IN ARRAY ids LOOP
    UPDATE {schema}.jobs j SET has_children = true
    WHERE j.id = p AND j.has_children IS NOT TRUE
    RETURNING j.status INTO st;
    IF NOT FOUND THEN
      SELECT j.status INTO st FROM {schema}.jobs j WHERE j.id = p FOR SHARE;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'invalid after: job % does not exist', p USING ERRCODE = '22023';
      END IF;
    END IF;
    IF st = 'failed' THEN
      RAISE EXCEPTION 'invalid after: job % has failed; retry it first, or leave it out', p
        USING ERRCODE = '22023';
    ELSIF st = 'done' THEN
      done := done || p;
    ELSE
      open := open + 1;
    END IF;
  END LOOP;
END;
$$;

-- A child is inserted: check and lock its parents, count those not done, hold it if any,
-- and record its edges. (The edges are written before the row: an insert that ON CONFLICT
-- then skips leaves edges to an id that never exists, which nothing follows.) An insert
-- that gives `waiting` itself is trusted to have done all this: enqueue_workflow() does it
-- for a whole array in a few set-wide statements instead of one trigger call per job.
CREATE OR REPLACE FUNCTION {schema}.jobs_after_hold() RETURNS trigger
LANGUAGE plpgsql
-- Index plans whatever the statistics say: a trigger's statements run once per row of a
-- statement that may insert thousands, against a table whose statistics may predate them
-- (a sequential scan chosen for a small table would make a big insert quadratic), and
-- nested loops over the edges' primary key (a hash join would read every edge at each
-- level of a recursive walk down a chain).
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
  wanted int;
  open   int;
BEGIN
  IF array_position(NEW.after, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'invalid after: a job id is NULL' USING ERRCODE = '22023';
  END IF;
  NEW.after := ARRAY(SELECT DISTINCT x FROM unnest(NEW.after) AS x ORDER BY x);
  wanted := cardinality(NEW.after);
  IF wanted = 0 THEN
    NEW.after := NULL;
    RETURN NEW;
  END IF;
  IF wanted > 10000 THEN
    RAISE EXCEPTION 'invalid after: % jobs; a job may wait for at most 10000', wanted
      USING ERRCODE = '22023';
  END IF;
  IF NEW.sequence IS NOT NULL THEN
    RAISE EXCEPTION 'invalid job: it waits for other jobs and belongs to sequence %; a job may do one or the other',
      quote_literal(NEW.sequence) USING ERRCODE = '22023';
  END IF;
  IF NEW.id = ANY (NEW.after) THEN
    RAISE EXCEPTION 'invalid after: job % cannot wait for itself', NEW.id USING ERRCODE = '22023';
  END IF;
  SELECT l.open INTO open FROM {schema}.flow_lock_parents(NEW.after) l;
  NEW.waiting := open;
  IF open > 0 AND NEW.held IS NULL THEN
    NEW.held := 'after';
  END IF;
  INSERT INTO {schema}.job_deps (parent, child, satisfied)
  SELECT p.id, NEW.id, p.status = 'done'
  FROM {schema}.jobs p
  WHERE p.id = ANY (NEW.after)
  ON CONFLICT DO NOTHING;
  RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS jobs_after_hold ON {schema}.jobs;
CREATE TRIGGER jobs_after_hold
BEFORE INSERT ON {schema}.jobs
FOR EACH ROW
WHEN (NEW.after IS NOT NULL AND NEW.waiting IS NULL)
EXECUTE FUNCTION {schema}.jobs_after_hold();

-- A child changes status outside the settling above:
--   * failed -> queued (a retry): refused (the row is left as it was) while a parent is
--     failed or gone, since it would wait for ever; otherwise it waits again for the
--     parents not done yet.
--   * queued -> failed while held (a cancel, or a hand-written update): it is no longer
--     held, so that retrying a parent does not bring it back.
CREATE OR REPLACE FUNCTION {schema}.jobs_after_guard() RETURNS trigger
LANGUAGE plpgsql
-- Index plans whatever the statistics say: a trigger's statements run once per row of a
-- statement that may insert thousands, against a table whose statistics may predate them
-- (a sequential scan chosen for a small table would make a big insert quadratic), and
-- nested loops over the edges' primary key (a hash join would read every edge at each
-- level of a recursive walk down a chain).
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
  IF NEW.status = 'queued' AND OLD.status = 'failed' THEN
    IF EXISTS (SELECT 1 FROM unnest(NEW.after) AS p(id)
               LEFT JOIN {schema}.jobs j ON j.id = p.id
               WHERE j.id IS NULL OR j.status = 'failed') THEN
      RETURN NULL;
    END IF;
    IF NEW.waiting > 0 THEN
      NEW.held := 'after';
    END IF;
  ELSIF NEW.status = 'failed' AND OLD.held = 'after' AND NEW.held = 'after'
        AND coalesce(current_setting('skiplock.settling', true), '') <> 'on' THEN
    NEW.held := NULL;
  END IF;
  RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS jobs_after_guard ON {schema}.jobs;
CREATE TRIGGER jobs_after_guard
BEFORE UPDATE OF status ON {schema}.jobs
FOR EACH ROW
WHEN (NEW.after IS NOT NULL
      AND ((OLD.status = 'failed' AND NEW.status = 'queued')
           OR (OLD.held = 'after' AND NEW.status = 'failed' AND OLD.status <> 'failed')))
EXECUTE FUNCTION {schema}.jobs_after_guard();

-- A parent changes status:
--   * to done: its unsatisfied edges become satisfied; each child's count goes down by one,
--     and a queued child with none left is released (wakes its queue's workers at commit).
--     Children are locked in id order. A parent done a second time (retried after it was
--     done) has no unsatisfied edge left: its children are not counted twice.
--   * to failed (its last attempt failed, it was cancelled, or a hand-written update): the
--     jobs waiting for it end failed (flow_fail).
--   * failed -> queued (a retry): the jobs that failed only because of it wait again, level
--     by level, each once none of its own parents is failed.
CREATE OR REPLACE FUNCTION {schema}.jobs_after_settle() RETURNS trigger
LANGUAGE plpgsql
-- Index plans whatever the statistics say: a trigger's statements run once per row of a
-- statement that may insert thousands, against a table whose statistics may predate them
-- (a sequential scan chosen for a small table would make a big insert quadratic), and
-- nested loops over the edges' primary key (a hash join would read every edge at each
-- level of a recursive walk down a chain).
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
  front bigint[];
  n     int;
BEGIN
  IF coalesce(current_setting('skiplock.settling', true), '') = 'on' THEN
    RETURN NULL;
  END IF;
  IF NEW.status = 'done' THEN
    WITH e AS (
      UPDATE {schema}.job_deps d SET satisfied = true
      WHERE d.parent = NEW.id AND NOT d.satisfied
      RETURNING d.child
    ), l AS (
      -- Each child probed by its id (the edges drive the join), locked in id order.
      SELECT j.id FROM e JOIN {schema}.jobs j ON j.id = e.child ORDER BY j.id FOR UPDATE OF j
    ), c AS (
      UPDATE {schema}.jobs j
      SET waiting = j.waiting - 1,
          held    = CASE WHEN j.waiting <= 1 AND j.held = 'after' AND j.status = 'queued'
                         THEN NULL ELSE j.held END
      FROM l
      WHERE j.id = l.id
      RETURNING j.queue, j.held, j.status
    )
    SELECT count(pg_notify(TG_TABLE_SCHEMA || '.jobs', q.queue)) INTO n
    FROM (SELECT DISTINCT queue FROM c WHERE held IS NULL AND status = 'queued') q;
  ELSIF NEW.status = 'failed' AND OLD.status IN ('queued', 'running') THEN
    PERFORM {schema}.flow_fail(NEW.id,
      CASE WHEN NEW.last_error = 'cancelled' THEN 'was cancelled' ELSE 'failed' END);
  ELSIF NEW.status = 'queued' AND OLD.status = 'failed' THEN
    PERFORM set_config('skiplock.settling', 'on', true);
    front := ARRAY[NEW.id];
    LOOP
      WITH c AS MATERIALIZED (
        SELECT DISTINCT e.child FROM {schema}.job_deps e
        WHERE e.parent = ANY (front) AND NOT e.satisfied
        ORDER BY e.child
      ), r AS (
        UPDATE {schema}.jobs j
        SET status      = 'queued',
            finished_at = NULL,
            last_error  = NULL,
            run_at      = now()
        FROM c
        WHERE j.id = c.child
          AND j.status = 'failed'
          AND j.held = 'after'
          AND NOT EXISTS (SELECT 1 FROM unnest(j.after) AS p(id)
                          LEFT JOIN {schema}.jobs pj ON pj.id = p.id
                          WHERE pj.id IS NULL OR pj.status = 'failed')
        RETURNING j.id
      )
      SELECT array_agg(id) INTO front FROM r;
      EXIT WHEN front IS NULL;
    END LOOP;
    PERFORM set_config('skiplock.settling', '', true);
  END IF;
  RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_after_settle ON {schema}.jobs;
CREATE TRIGGER jobs_after_settle
AFTER UPDATE OF status ON {schema}.jobs
FOR EACH ROW
WHEN (NEW.has_children AND OLD.status IS DISTINCT FROM NEW.status
      AND (NEW.status IN ('done', 'failed') OR OLD.status = 'failed'))
EXECUTE FUNCTION {schema}.jobs_after_settle();

-- A job of a workflow is deleted (by an operator or by pruning). Deleting a parent that is
-- not done ends the jobs waiting for it, failed ("was deleted"): no job waits for ever. Its
-- edges go with it. After the row (at the end of the statement): a statement that deletes a
-- parent and its children together must not update the children it is deleting.
CREATE OR REPLACE FUNCTION {schema}.jobs_after_deleted() RETURNS trigger
LANGUAGE plpgsql
-- Index plans whatever the statistics say: a trigger's statements run once per row of a
-- statement that may insert thousands, against a table whose statistics may predate them
-- (a sequential scan chosen for a small table would make a big insert quadratic), and
-- nested loops over the edges' primary key (a hash join would read every edge at each
-- level of a recursive walk down a chain).
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
  IF OLD.has_children THEN
    IF OLD.status <> 'done' THEN
      PERFORM {schema}.flow_fail(OLD.id, 'was deleted');
    END IF;
    DELETE FROM {schema}.job_deps WHERE parent = OLD.id;
  END IF;
  IF OLD.after IS NOT NULL THEN
    DELETE FROM {schema}.job_deps WHERE parent = ANY (OLD.after) AND child = OLD.id;
  END IF;
  RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_after_deleted ON {schema}.jobs;
CREATE TRIGGER jobs_after_deleted
AFTER DELETE ON {schema}.jobs
FOR EACH ROW
WHEN (OLD.has_children OR OLD.after IS NOT NULL)
EXECUTE FUNCTION {schema}.jobs_after_deleted();

-- enqueue() takes the jobs a new job waits for (named argument `after`, optional):
--
--   SELECT skiplock.enqueue('reports', '{"day": "2026-12-01"}', after => ARRAY[41, 42]);
--
-- Migration 11's function otherwise; a new argument needs a new function, so the old one is
-- dropped (calls by position or name keep working).
DROP FUNCTION IF EXISTS {schema}.enqueue(text, jsonb, text, smallint, int, interval, timestamptz,
  text, text);

CREATE OR REPLACE FUNCTION {schema}.enqueue(
  queue        text,
  payload      jsonb,
  kind         text        DEFAULT 'default',
  priority     smallint    DEFAULT 0,
  max_attempts int         DEFAULT 5,
  delay        interval    DEFAULT NULL,
  run_at       timestamptz DEFAULT NULL,
  key          text        DEFAULT NULL,
  sequence     text        DEFAULT NULL,
  after        bigint[]    DEFAULT NULL
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
                                   key, sequence, after)
  VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.priority, enqueue.max_attempts,
          coalesce(enqueue.run_at, now() + coalesce(enqueue.delay, interval '0')),
          enqueue.key, enqueue.sequence, enqueue.after)
  RETURNING j.id INTO new_id;
  RETURN new_id;
END;
$$;

-- A workflow in one call and one transaction: a JSON array of jobs, each an object with
--   "kind" (required), "payload" (default {}), "queue" (default 'default'), "priority",
--   "max_attempts", "delay" (an interval as text, or seconds) or "run_at" (a timestamp as
--   text, or seconds since the Unix epoch), "key",
--   "ref" (a name for this job within the array) and "after" (an array whose elements are
--   the refs of jobs listed EARLIER in the array, or ids of existing jobs).
-- Returns the new ids in the array's order. All or nothing: the first refusal (with the
-- position of the job, counted from 1) refuses the whole array. A job may only name refs
-- defined above it, so a cycle cannot be written (the command sorts a file's lines first).
--
--   SELECT * FROM skiplock.enqueue_workflow('[
--     {"ref": "fetch", "kind": "fetch", "payload": {"url": "..."}},
--     {"ref": "a", "kind": "resize", "after": ["fetch"]},
--     {"ref": "b", "kind": "thumbnail", "after": ["fetch"]},
--     {"kind": "publish", "after": ["a", "b"]}
--   ]');
--
-- One INSERT for the whole array, its ids drawn first so that refs resolve before it.
CREATE OR REPLACE FUNCTION {schema}.enqueue_workflow(jobs jsonb)
RETURNS TABLE (n int, id bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  total int;
  ids   bigint[];
  refs  jsonb;
  used  jsonb;
  ext   bigint[];
  ext_done bigint[] := '{}';
  bad   record;
BEGIN
  IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
    RAISE EXCEPTION 'invalid workflow: give a JSON array of jobs' USING ERRCODE = '22023';
  END IF;
  total := jsonb_array_length(jobs);
  IF total = 0 THEN
    RETURN;
  END IF;
  IF total > 100000 THEN
    RAISE EXCEPTION 'invalid workflow: % jobs; at most 100000 in one call', total
      USING ERRCODE = '22023';
  END IF;
  SELECT e.n INTO bad FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n)
  WHERE jsonb_typeof(e.job) <> 'object' ORDER BY e.n LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'invalid workflow: job % is not a JSON object', bad.n USING ERRCODE = '22023';
  END IF;
  SELECT e.n, k.key INTO bad
  FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n), jsonb_object_keys(e.job) AS k(key)
  WHERE k.key NOT IN ('ref', 'after', 'kind', 'payload', 'queue', 'priority', 'max_attempts',
                      'delay', 'run_at', 'key')
  ORDER BY e.n LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'invalid workflow: job %: unknown field %', bad.n, quote_literal(bad.key)
      USING ERRCODE = '22023';
  END IF;
  SELECT e.n, e.job INTO bad FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n)
  WHERE NOT (e.job ? 'kind') OR jsonb_typeof(e.job->'kind') <> 'string'
     OR (e.job->>'kind') !~ '^[A-Za-z0-9_.:-]{1,128}$'
     OR (e.job ? 'queue' AND (jsonb_typeof(e.job->'queue') <> 'string'
                              OR (e.job->>'queue') !~ '^[A-Za-z0-9_.-]{1,128}$'))
     OR (e.job ? 'key' AND (jsonb_typeof(e.job->'key') <> 'string'
                            OR (e.job->>'key') !~ '^[A-Za-z0-9_.:@/-]{1,128}$'))
     OR (e.job ? 'ref' AND (jsonb_typeof(e.job->'ref') <> 'string'
                            OR octet_length(e.job->>'ref') NOT BETWEEN 1 AND 256))
     OR (e.job ? 'after' AND jsonb_typeof(e.job->'after') <> 'array')
     OR (e.job ? 'delay' AND e.job ? 'run_at')
     OR octet_length(coalesce(e.job->'payload', '{}')::text) > 1048576
  ORDER BY e.n LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'invalid workflow: job %: %', bad.n,
      CASE
        WHEN NOT (bad.job ? 'kind') THEN 'it has no "kind"'
        WHEN jsonb_typeof(bad.job->'kind') <> 'string'
          OR (bad.job->>'kind') !~ '^[A-Za-z0-9_.:-]{1,128}$'
          THEN 'invalid kind: use 1 to 128 letters, digits, "_", ".", ":" or "-"'
        WHEN bad.job ? 'queue' AND (jsonb_typeof(bad.job->'queue') <> 'string'
                                    OR (bad.job->>'queue') !~ '^[A-Za-z0-9_.-]{1,128}$')
          THEN 'invalid queue: use 1 to 128 letters, digits, "_", "." or "-"'
        WHEN bad.job ? 'key' AND (jsonb_typeof(bad.job->'key') <> 'string'
                                  OR (bad.job->>'key') !~ '^[A-Za-z0-9_.:@/-]{1,128}$')
          THEN 'invalid key: use 1 to 128 letters, digits, "_", ".", ":", "@", "/" or "-"'
        WHEN bad.job ? 'ref' AND (jsonb_typeof(bad.job->'ref') <> 'string'
                                  OR octet_length(bad.job->>'ref') NOT BETWEEN 1 AND 256)
          THEN '"ref" must be a string of 1 to 256 bytes'
        WHEN bad.job ? 'after' AND jsonb_typeof(bad.job->'after') <> 'array'
          THEN '"after" must be an array of refs and job ids'
        WHEN bad.job ? 'delay' AND bad.job ? 'run_at' THEN 'give delay or run_at, not both'
        ELSE 'its payload is over 1048576 bytes'
      END USING ERRCODE = '22023';
  END IF;
  SELECT d.n, d.ref INTO bad
  FROM (SELECT e.n, e.job->>'ref' AS ref,
               row_number() OVER (PARTITION BY e.job->>'ref' ORDER BY e.n) AS k
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n)
        WHERE e.job ? 'ref') d
  WHERE d.k = 2 ORDER BY d.n LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'invalid workflow: job %: ref % is used twice', bad.n, quote_literal(bad.ref)
      USING ERRCODE = '22023';
  END IF;
  refs := coalesce((SELECT jsonb_object_agg(e.job->>'ref', e.n)
                    FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n)
                    WHERE e.job ? 'ref'), '{}');
  -- Each element of "after": a ref of a job listed above (by position), or a job id.
  SELECT e.n, a.a, (refs->>(a.a #>> '{}'))::int AS at INTO bad
  FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n),
       jsonb_array_elements(CASE WHEN e.job ? 'after' THEN e.job->'after' ELSE '[]' END) AS a(a)
  WHERE CASE jsonb_typeof(a.a)
          WHEN 'string' THEN coalesce((refs->>(a.a #>> '{}'))::int >= e.n, true)
          WHEN 'number' THEN (a.a #>> '{}') !~ '^[0-9]{1,18}$'
          ELSE true
        END
  ORDER BY e.n LIMIT 1;
  IF FOUND THEN
    IF jsonb_typeof(bad.a) = 'string' AND bad.at IS NOT NULL THEN
      RAISE EXCEPTION 'invalid workflow: job % waits for ref %, which is not listed above it (a cycle, or list each job after the jobs it waits for)',
        bad.n, bad.a USING ERRCODE = '22023';
    ELSIF jsonb_typeof(bad.a) = 'string' THEN
      RAISE EXCEPTION 'invalid workflow: job % waits for ref %, which no job has', bad.n, bad.a
        USING ERRCODE = '22023';
    END IF;
    RAISE EXCEPTION 'invalid workflow: job %: "after" holds %, which is neither a ref nor a job id',
      bad.n, bad.a USING ERRCODE = '22023';
  END IF;
  -- The refs some job waits for: those jobs are marked as parents as they are inserted.
  used := coalesce((SELECT jsonb_object_agg(a.a #>> '{}', true)
                    FROM jsonb_array_elements(jobs) AS e(job),
                         jsonb_array_elements(e.job->'after') AS a(a)
                    WHERE e.job ? 'after' AND jsonb_typeof(a.a) = 'string'), '{}');
  -- Parents outside the array: locked and checked as the insert trigger does for one job;
  -- those already done count as satisfied.
  ext := ARRAY(SELECT DISTINCT (a.a #>> '{}')::bigint
               FROM jsonb_array_elements(jobs) AS e(job),
                    jsonb_array_elements(e.job->'after') AS a(a)
               WHERE e.job ? 'after' AND jsonb_typeof(a.a) = 'number'
               ORDER BY 1);
  IF cardinality(ext) > 0 THEN
    SELECT l.done INTO ext_done FROM {schema}.flow_lock_parents(ext) l;
  END IF;
  ids := ARRAY(SELECT nextval(pg_get_serial_sequence('{schema}.jobs', 'id'))
               FROM generate_series(1, total));
  -- One INSERT in the array's order, each job with its parents, its count of parents not
  -- done and its hold already known (so the insert trigger leaves it alone), then one
  -- INSERT of every edge.
  BEGIN
    INSERT INTO {schema}.jobs AS j (id, queue, kind, payload, priority, max_attempts, run_at,
                                     key, after, waiting, held, has_children)
    OVERRIDING SYSTEM VALUE
    SELECT ids[e.n],
           coalesce(e.job->>'queue', 'default'),
           e.job->>'kind',
           coalesce(e.job->'payload', '{}'::jsonb),
           coalesce((e.job->>'priority')::smallint, 0),
           coalesce((e.job->>'max_attempts')::int, 5),
           coalesce(CASE WHEN jsonb_typeof(e.job->'run_at') = 'number'
                         THEN to_timestamp((e.job->>'run_at')::float8)
                         ELSE (e.job->>'run_at')::timestamptz END,
                    now() + coalesce(CASE WHEN jsonb_typeof(e.job->'delay') = 'number'
                                          THEN (e.job->>'delay')::float8 * interval '1 second'
                                          ELSE (e.job->>'delay')::interval END,
                                     interval '0')),
           e.job->>'key',
           p.after,
           p.waiting,
           CASE WHEN p.waiting > 0 THEN 'after' END,
           CASE WHEN e.job ? 'ref' AND used ? (e.job->>'ref') THEN true END
    FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n)
    LEFT JOIN LATERAL (
      SELECT array_agg(DISTINCT x.id ORDER BY x.id) AS after,
             count(DISTINCT x.id) FILTER (WHERE NOT x.id = ANY (ext_done))::int AS waiting
      FROM (SELECT CASE WHEN jsonb_typeof(a.a) = 'string'
                        THEN ids[(refs->>(a.a #>> '{}'))::int]
                        ELSE (a.a #>> '{}')::bigint END AS id
            FROM jsonb_array_elements(e.job->'after') AS a(a)) x
    ) p ON e.job ? 'after' AND jsonb_array_length(e.job->'after') > 0
    ORDER BY e.n;
  EXCEPTION
    WHEN invalid_text_representation OR numeric_value_out_of_range OR invalid_datetime_format
         OR datetime_field_overflow OR check_violation OR invalid_parameter_value THEN
      RAISE EXCEPTION 'invalid workflow: %', SQLERRM USING ERRCODE = '22023';
  END;
  INSERT INTO {schema}.job_deps (parent, child, satisfied)
  SELECT DISTINCT x.id, ids[e.n], x.id = ANY (ext_done)
  FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, n),
       LATERAL (SELECT CASE WHEN jsonb_typeof(a.a) = 'string'
                            THEN ids[(refs->>(a.a #>> '{}'))::int]
                            ELSE (a.a #>> '{}')::bigint END AS id
                FROM jsonb_array_elements(e.job->'after') AS a(a)) x
  WHERE e.job ? 'after';
  RETURN QUERY SELECT g.n::int, ids[g.n] FROM generate_series(1, total) AS g(n);
END;
$$;

-- Whoever may use the jobs table may use the edges (the triggers write them as that role).
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
    EXECUTE format('GRANT %s ON {schema}.job_deps TO %s', g.privilege, g.grantee);
  END LOOP;
END
$$;
