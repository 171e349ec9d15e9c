-- One reaper round, run by the worker's reaper and by Client::reap alike:
--   * jobs whose lease expired go back to `queued`, or to `failed` once they used all their
--     attempts (a job that kills every worker that runs it must not come back forever);
--     an earlier error is kept, otherwise the reason is 'lease expired';
--     the attempt is appended to the job's history (`errors`, the last 20, as
--     job_finish_many.sql does) with the error 'lease expired';
--   * queued jobs with no attempt left (attempts >= max_attempts: the claim would skip them
--     forever) become `failed` with 'no attempts left' unless they have an error already;
--   * cancelled jobs whose lease has ended give it up (locked_until becomes NULL): a
--     cancelled job keeps its slot until its lease ends (job_cancel.sql), and after that it
--     need not stay in the lease index (migration 18), which then holds the running jobs and
--     the cancelled ones still holding a slot, not every job ever cancelled while it ran.
--     These rows are not returned (their state does not change).
-- $1 is the most rows of each kind one round moves; the caller repeats while a round comes
-- back full.
--
-- The ended leases are found through the lease index (jobs_lease_idx, (queue, locked_until)
-- over the running jobs and the cancelled ones holding a slot, migration 18), whatever the
-- statistics say: a walk from queue to queue (one descent to find each queue that has
-- leases), and in each queue its leases in the order they end, up to the first that has not
-- ended, $1 at most. No other index holds these rows in an order the walk could use, so
-- neither the table nor its finished history is read, however stale the statistics (with
-- statistics taken while every job was running with an ended lease, a round written as
-- `WHERE status = 'running' AND locked_until < now() ORDER BY id LIMIT $1` walked the whole
-- table in id order: it::plans::a_reaper_round_reads_the_leases_not_the_history_with_stale_statistics).
--
-- Rows are locked in id order with SKIP LOCKED, each by one primary-key probe (a LATERAL
-- subquery by id only): one row another session holds (a worker writing that job's outcome,
-- an operator's open transaction) is left for a later round instead of making the whole
-- round wait and fail on lock_timeout, and the id order matches the batched outcome and
-- heartbeat statements. The state and the lease are tested on the locked, latest row
-- version (outside the subquery, which OFFSET 0 keeps from taking the test as a filter an
-- index on status could serve), so a job completed concurrently is left alone; the UPDATEs
-- then take their rows by id (`= ANY` of an array: primary-key probes, whatever the
-- statistics say; a join with the locked rows became a scan of the whole table).
-- Jobs it returns to `queued` send one notification per queue (at commit), so that idle
-- workers of any process, the fallback poll off included, pick them up at once.
WITH RECURSIVE leased(queue) AS (
  (SELECT j.queue
   FROM {schema}.jobs j
   WHERE j.status IN ('running', 'failed') AND j.locked_until IS NOT NULL
   ORDER BY j.queue
   LIMIT 1)
  UNION ALL
  SELECT (SELECT j.queue
          FROM {schema}.jobs j
          WHERE j.status IN ('running', 'failed') AND j.locked_until IS NOT NULL
            AND j.queue > l.queue
          ORDER BY j.queue
          LIMIT 1)
  FROM leased l
  WHERE l.queue IS NOT NULL
), ended AS MATERIALIZED (
  SELECT e.id, e.status
  FROM leased l
  CROSS JOIN LATERAL (
    SELECT j.id, j.status
    FROM {schema}.jobs j
    WHERE j.queue = l.queue
      AND j.status IN ('running', 'failed') AND j.locked_until IS NOT NULL
      AND j.locked_until < now()
    ORDER BY j.queue, j.locked_until
    LIMIT $1
  ) e
  WHERE l.queue IS NOT NULL
), locked AS MATERIALIZED (
  SELECT x.id, x.status
  FROM ((SELECT id FROM ended WHERE status = 'running' ORDER BY id LIMIT $1)
        UNION ALL
        (SELECT id FROM ended WHERE status = 'failed' ORDER BY id LIMIT $1)
        ORDER BY id) c
  CROSS JOIN LATERAL (
    SELECT j.id, j.status, j.locked_until
    FROM {schema}.jobs j
    WHERE j.id = c.id
    OFFSET 0
    FOR UPDATE OF j SKIP LOCKED
  ) x
  WHERE x.status IN ('running', 'failed') AND x.locked_until < now()
), expired AS MATERIALIZED (
  SELECT id FROM locked WHERE status = 'running'
), exhausted AS MATERIALIZED (
  SELECT id
  FROM {schema}.jobs
  WHERE status = 'queued'
    AND attempts >= max_attempts
  ORDER BY id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), freed AS MATERIALIZED (
  SELECT id FROM locked WHERE status = 'failed'
), released AS (
  UPDATE {schema}.jobs j
  SET locked_until = NULL
  WHERE j.id = ANY (ARRAY(SELECT id FROM freed))
  RETURNING j.id
), doomed AS MATERIALIZED (
  SELECT id FROM expired
  UNION ALL
  SELECT id FROM exhausted
), reaped AS (
UPDATE {schema}.jobs j
SET status       = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
    finished_at  = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    locked_until = NULL,
    last_error   = coalesce(j.last_error,
                            CASE WHEN j.status = 'queued' THEN 'no attempts left'
                                 ELSE 'lease expired' END),
    errors       = CASE WHEN j.status = 'running' THEN
                     jsonb_path_query_array(coalesce(j.errors, '[]') || jsonb_build_array(
                       jsonb_build_object('attempt', j.attempts, 'at', now(),
                                          'error', 'lease expired',
                                          'ran_ms', (extract(epoch FROM now() - j.attempted_at)
                                                     * 1000)::int8)),
                       '$[last - 19 to last]')
                   ELSE j.errors END
WHERE j.id = ANY (ARRAY(SELECT id FROM doomed))
RETURNING j.id, j.status, j.attempts, j.queue
), bound AS MATERIALIZED (
  -- A limited queue waiting for a slot learns that one freed (see job_finish_many.sql).
  SELECT q.name, q.limit_bound
  FROM {schema}.queues q
  WHERE q.name IN (SELECT DISTINCT queue FROM reaped) AND q.limited
), woken AS (
  SELECT pg_notify({channel}, q.queue)
  FROM (SELECT queue FROM reaped WHERE status = 'queued'
        UNION
        SELECT name FROM bound WHERE limit_bound = 'slots') q
)
-- Referencing `woken` makes it run (a plain SELECT in WITH runs only when read).
SELECT id, status, attempts
FROM reaped
WHERE (SELECT count(*) FROM woken) >= 0
