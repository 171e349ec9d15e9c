-- skiplock migration 20: a per-key slot count that only the key index can answer.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: the per-key walk (claim_walk(), migration 12) counts each key's slots in use, up to
-- the limit, with one descent of jobs_slots_idx (queue, key). Since migration 18,
-- jobs_lease_idx (queue, locked_until) has the same predicate but for the key, so it could
-- answer the same count: every running row of the queue, read one by one and filtered by
-- key. The limited claim keeps one plan per session (plan_cache_mode = force_generic_plan),
-- made at its first call, and while the queue has few running jobs the two indexes cost the
-- planner about the same (5.90 against 5.92 in logged plans): which one a session took
-- depended on the two indexes' sizes at its first claim. A session that took jobs_lease_idx
-- read every running job of the queue for every key it visited: in a drain of 100,000 no-op
-- jobs over 1,000 keys with a per-key limit of 2 (concurrency 200, claims of 500), the walk's
-- statement took 17-18 ms instead of 3.6-7.5, and the whole drain ran at 21,000-27,000 jobs/s
-- instead of 32,000-40,000, from one run to the next of the same setup.
--
-- Now no statement that can use jobs_lease_idx can answer the count. The index below holds
-- the keyed rows that are running or hold a slot, as jobs_slots_idx did, and also a running
-- row without a lease (which only a hand-written UPDATE makes: such rows are rare, and the
-- count leaves them out as before, by a test on the row). Its predicate does not require a
-- lease for a running row, and neither does the count's: so the count no longer implies
-- jobs_lease_idx's predicate (`locked_until IS NOT NULL` for every row), and the planner
-- cannot pick that index for it, whatever the statistics or the sizes
-- (it::limits::the_key_walk_counts_slots_through_the_key_index_whatever_the_index_sizes).
--
-- The new index is built inside this migration's transaction: on a large table the build
-- reads the table once (writes wait meanwhile), as migration 18's did. To keep writing
-- meanwhile, create it beforehand with CREATE INDEX CONCURRENTLY under the name
-- jobs_slots_v20_idx with this definition: the migration then keeps it (one that is not
-- valid, from a build that failed, is built again).

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_index x
             WHERE x.indexrelid = to_regclass('{schema}.jobs_slots_v20_idx') AND NOT x.indisvalid) THEN
    DROP INDEX {schema}.jobs_slots_v20_idx;
  END IF;
  -- Run again on a schema that has it: jobs_slots_idx is this migration's index already.
  IF to_regclass('{schema}.jobs_slots_v20_idx') IS NULL
     AND EXISTS (SELECT 1 FROM pg_index x
                 WHERE x.indexrelid = to_regclass('{schema}.jobs_slots_idx')
                   AND pg_get_expr(x.indpred, x.indrelid) LIKE '%OR (locked_until IS NOT NULL)%') THEN
    ALTER INDEX {schema}.jobs_slots_idx RENAME TO jobs_slots_v20_idx;
  END IF;
END
$$;

CREATE INDEX IF NOT EXISTS jobs_slots_v20_idx ON {schema}.jobs (queue, key)
  WHERE key IS NOT NULL AND status IN ('running', 'failed')
    AND (status = 'running' OR locked_until IS NOT NULL);

DROP INDEX IF EXISTS {schema}.jobs_slots_idx;
ALTER INDEX {schema}.jobs_slots_v20_idx RENAME TO jobs_slots_idx;

-- claim_walk() as in migration 12 but for the count of a key's slots in use: the same rows
-- (running with a lease, or failed with a lease that has not ended), tested so that only
-- the index above can serve it. `(u.locked_until IS NOT NULL) IS TRUE` is one test that
-- implies no index predicate: it keeps a running row without a lease out of the count, as
-- before, without letting the count imply jobs_lease_idx's predicate.
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
                   AND u.status IN ('running', 'failed')
                   AND (u.status = 'running' OR u.locked_until > ts)
                   AND (u.locked_until IS NOT NULL) IS TRUE
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
