-- skiplock migration 25: a cheaper step for the per-key walk.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: claim_walk() (migrations 12 and 20) visits one key per step of a recursive query,
-- and a claim of a per-key-limited queue visits about one key for every `per_key` jobs it
-- takes, one claim at a time under the queue's row lock: the walk's cost per key is paid for
-- every job. Its step read the key's first three rows in claim order (one descent of
-- jobs_key_ready_idx) and kept those of the first key they met through a window
-- (row_number() and first_value() over the three rows) and an aggregate with a filter per
-- column. The descent was half of the step; the window and the filtered aggregate, rebuilt
-- for every key, were most of the rest. Measured on two cores:
-- - the walk alone, pgbench of one walk of 280 keys for 500 jobs (1,000 keys of 50 jobs,
--   per-key limit 2, 100 keys full), five alternating runs each: 3.8-5.3 ms before, 3.2-3.9
--   ms now;
-- - inside claim_limited(), 150 claims of 500 through 100,000 jobs over 1,000 keys (each
--   claim's jobs then completed), pg_stat_statements, two alternating runs each: the walk's
--   statement 2.93-3.20 ms a claim before, 2.64-2.72 ms now, of a claim of 9.6-10.7 ms (its
--   UPDATE of the 500 rows took 4.3-4.7 ms).
--
-- Now the step gathers the three rows into three arrays with one plain aggregate (keys,
-- ids, and whether each is due), in the scan's order, which is claim order (an aggregate
-- over an ordered, limited subquery reads its rows in that order, as row_number() OVER ()
-- read them before; the function is not parallel safe, so no parallel plan reorders them):
-- the first key
-- is the first element, and its rows are the first ones, since rows of one key come
-- together in key order. Which of the three rows are the first key's is read off the keys
-- array (the second and third elements compared with the first). Same arguments, same
-- result columns, same rows, same index descents. it::limits checks the walk's promises
-- (the_key_walk_gives_each_key_its_free_slots_in_turns: keys in turn, round robin, a key's
-- free slots read in more than one step; a_key_headed_by_a_job_not_due_yet_gives_the_due_job_behind_it;
-- a_per_key_limit_holds_and_keys_do_not_block_each_other: the limit exact under load),
-- and the first two fail if the step takes too few of the first key's rows or does not
-- notice a row not due yet.

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
        SELECT g.k, g.ids[1:g.n] AS ids, g.n, NOT (false = ANY (g.due[1:g.n])) AS all_ready,
               p_per_key - (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.jobs u
                 WHERE u.queue = p_queue AND u.key = g.k
                   AND u.status IN ('running', 'failed')
                   AND (u.status = 'running' OR u.locked_until > ts)
                   AND (u.locked_until IS NOT NULL) IS TRUE
                 LIMIT p_per_key) x) AS free
        FROM (
          -- The first key's rows among the three: the first one, and the second and third
          -- when their key is the first's (a NULL element, past the rows read, is not).
          SELECT a.ks[1] AS k, a.ids, a.due,
                 CASE WHEN a.ks[3] = a.ks[1] THEN 3 WHEN a.ks[2] = a.ks[1] THEN 2 ELSE 1 END AS n
          FROM (
            SELECT array_agg(j.key) AS ks, array_agg(j.id) AS ids,
                   array_agg(j.run_at <= ts) AS due
            FROM (SELECT j.key, j.id, j.run_at FROM {schema}.jobs j
                  WHERE j.queue = p_queue AND j.status = 'queued' AND j.held IS NULL
                    AND j.key > w.k AND (p_upto IS NULL OR j.key <= p_upto)
                    AND j.attempts < j.max_attempts
                  ORDER BY j.queue, j.key, j.priority, j.run_at, j.id
                  LIMIT 3) j
          ) a
        ) g
        WHERE g.k IS NOT NULL
        OFFSET 0
      ) h
    ) s
    WHERE w.given < p_keys
  )
  SELECT w.k, t.id, t.rn, w.pos, w.free
  FROM walk w
  CROSS JOIN LATERAL unnest(w.ids) WITH ORDINALITY AS t(id, rn)
$$;
