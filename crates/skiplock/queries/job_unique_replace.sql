-- Replace the payload, and with $5 the run_at, of the queued job holding each unique key of
-- $1 (the debounce and throttle conflict modes). Returns the key and id of each job changed.
--
-- $1 keys, $2 payloads (JSON text), $3 run_at in microseconds since the epoch (NULL: use the
-- delay), $4 delays in microseconds from now(), $5 whether run_at is replaced too; one array
-- element per key, each key at most once.
--
-- Only a queued job is touched: the key's running job is never changed (nor locked). Keys
-- are sorted and each row is locked with one probe of jobs_unique_idx, so that concurrent
-- replacers lock in the same order; FOR UPDATE re-checks `queued` on the latest row version,
-- so a job claimed meanwhile is left alone. A replaced run_at is never earlier than the
-- lease of a cancelled attempt that a retry left in locked_until (job_retry.sql): two
-- attempts never overlap. Changed jobs wake their queue (at commit): a
-- replaced run_at may be earlier than the one a worker is waiting for.
WITH o AS MATERIALIZED (
  SELECT *
  FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::bool[])
       AS o(ukey, payload, run_at_us, delay_us, replace_run_at)
  ORDER BY ukey
), t AS MATERIALIZED (
  SELECT l.id, o.*
  FROM o
  CROSS JOIN LATERAL (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.unique_key = o.ukey
      AND j.unique_key IS NOT NULL
      AND j.status = 'queued'
    FOR UPDATE OF j
  ) l
), replaced AS (
  UPDATE {schema}.jobs j
  SET payload = t.payload::jsonb,
      run_at  = CASE WHEN t.replace_run_at
                     THEN greatest(coalesce('epoch'::timestamptz + t.run_at_us * interval '1 microsecond',
                                            now() + t.delay_us * interval '1 microsecond'),
                                   j.locked_until)
                     ELSE j.run_at END
  FROM t
  WHERE j.id = t.id
  RETURNING j.id, j.unique_key, j.queue
), woken AS (
  SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM replaced) q
)
SELECT unique_key, id FROM replaced
WHERE (SELECT count(*) FROM woken) >= 0
