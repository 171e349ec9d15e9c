-- Enqueue jobs that carry a uniqueness rule, one array per column. Returns one row per
-- input element: n (its 1-based position), its unique key, and the id of the job it
-- inserted (NULL: not inserted).
--
-- The columns of job_insert_many.sql, then per job: $8 what makes jobs the same ('key',
-- 'args' or 'fields'), $9 the field names as a JSON array (for 'fields'), $10 the explicit
-- key (for 'key'), $11 whether the queue is part of the key, $12 the time bucket in
-- microseconds (0: none), $13 whether the job may queue behind a running duplicate, $14 the
-- job's key and $15 its sequence (migration 11).
--
-- The key comes from unique_key() (migration 6), in the database, so the time bucket follows
-- the database's clock. Elements with the same key are inserted once (the first in input
-- order); the caller reports the others as its duplicates. ON CONFLICT DO NOTHING against
-- jobs_unique_idx: a concurrent enqueuer's uncommitted row with the same key makes this
-- statement wait for its transaction, then insert (it rolled back) or skip (it committed).
-- DO NOTHING takes no lock on an existing duplicate, so that a running or queued job is never
-- held up by an enqueuer's open transaction. A skipped element's active duplicate is looked
-- up by the caller in a later statement (job_unique_lookup.sql): this statement's snapshot
-- may predate the row that made it skip.
WITH src AS MATERIALIZED (
  SELECT j.*,
         {schema}.unique_key(j.unique_by, j.kind, CASE WHEN j.by_queue THEN j.queue END,
                             j.payload::jsonb,
                             ARRAY(SELECT jsonb_array_elements_text(j.fields::jsonb)),
                             j.key, j.period_us) AS ukey
  FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int4[], $6::int8[], $7::int8[],
              $8::text[], $9::text[], $10::text[], $11::bool[], $12::int8[], $13::bool[],
              $14::text[], $15::text[])
       WITH ORDINALITY AS j(queue, kind, payload, priority, max_attempts, run_at_us, delay_us,
                            unique_by, fields, key, by_queue, period_us, queued_only,
                            job_key, sequence, n)
), firsts AS MATERIALIZED (
  SELECT DISTINCT ON (ukey) *
  FROM src
  ORDER BY ukey, n
), ins AS (
  INSERT INTO {schema}.jobs
    (queue, kind, payload, priority, max_attempts, run_at, unique_key, unique_queued_only,
     key, sequence)
  SELECT f.queue, f.kind, f.payload::jsonb, f.priority, f.max_attempts,
         coalesce('epoch'::timestamptz + f.run_at_us * interval '1 microsecond',
                  now() + f.delay_us * interval '1 microsecond'),
         f.ukey, f.queued_only, f.job_key, f.sequence
  FROM firsts f
  ORDER BY f.n
  ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
  DO NOTHING
  RETURNING id, unique_key
)
SELECT s.n, s.ukey, i.id
FROM src s
LEFT JOIN ins i ON i.unique_key = s.ukey
