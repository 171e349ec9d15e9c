-- Write the outcomes of many jobs in one statement: the worker's completer, and
-- Client::complete / Client::fail with a batch of one.
--
-- $1 ids, $2 the attempts each claim returned, $3 outcomes, $4 error messages, $5 requeue
-- delays (microseconds), $6 backoff bases and $7 backoff caps (microseconds), $8 outputs
-- (JSON text, NULL for none; written with a completion only); one array element per job. Outcomes (the words of the Rust `Outcome` type's `sql_name`):
--   complete   the job succeeded                   -> done
--   retry      a retryable error                   -> queued after least(cap, base * 2^attempts),
--                                                     or failed once attempts >= max_attempts
--                                                     (the only place this formula is written)
--   discard    a permanent error                   -> failed now
--   snooze     the handler asked to run later      -> queued after the delay, with max_attempts
--                                                     raised by one so that it costs no attempt
--                                                     (attempts never goes down: it is the
--                                                     fencing token)
--   hand_back  claimed or running at shutdown      -> queued at its old run_at, so it keeps its
--                                                     place in line (and a periodic job its
--                                                     fire time); max_attempts raised by one
--                                                     as for a snooze
--   unserved   the worker has no handler for the   -> queued after the delay (the worker's
--              job's kind                             back-off for the kind), max_attempts
--                                                     raised by one as for a snooze, and the
--                                                     error kept, so that a worker that
--                                                     handles the kind runs it
--
-- A failed attempt (retry, discard) is appended to the job's `errors` (migration 14): its
-- attempt, when it ended, its error (cut to 2048 characters; `last_error` keeps it whole)
-- and how long it ran (from `attempted_at`, set by the claim), keeping the last 20. The
-- same UPDATE, only on those rows: a completion writes the column back unchanged.
--
-- A job that other jobs wait for (migration 13) makes them ready, or ends them failed, in
-- this statement: the jobs table's triggers do it for rows whose has_children is set, so
-- a plain batch runs no trigger function and pays nothing for workflows.
--
-- Returns one row per input element: n (its 1-based position), result, and for a written
-- row its new status, run_at and the retry delay from now() in microseconds. result is
--   written  the guard held (running, same attempt) and the row was updated
--   lost     the guard did not hold: the job is no longer this claim's
--   busy     another session holds the row locked (the reaper, an operator, this worker's
--            own heartbeat): nothing was written and nothing is known; try again shortly
--
-- Rows that go back to `queued` (retries, snoozes, hand-backs at shutdown) send one
-- notification per queue at commit, so that an idle worker elsewhere, the fallback poll off
-- included, learns of them (it claims, or looks up when the next job is due); a batch of
-- completions only sends none. `woken` runs because the final SELECT reads it.
--
-- A limited queue (migration 11) whose last claim left ready jobs behind for want of a slot
-- (`limit_bound = 'slots'`) gets one notification too: a slot freed. The row is read
-- without a lock (a primary-key probe per queue of the batch). A claim in flight that is
-- about to mark the queue bound is not seen here; that claim notifies by itself when it
-- marks it (see claim_limited()), so that its workers claim again once, after this outcome
-- has committed, and find the slot it freed.
--
-- How: the input is sorted by id and each element locks its row with one primary-key probe
-- (a LATERAL subquery, so the plan cannot be anything but one probe per element: the input
-- is never rescanned per row, whatever the statistics say about running jobs). SKIP LOCKED:
-- a row another session holds is skipped and reported busy instead of making the whole
-- batch wait for it (or fail on lock_timeout). The guard is checked on the locked, latest
-- row version; the UPDATE then joins only on id, with no filter of its own that stale
-- statistics could make look selective. A line ending in `-- fence` is the attempt part of
-- the guard (left out only by the test-only negative control).
WITH o AS MATERIALIZED (
  SELECT *
  FROM unnest($1::int8[], $2::int4[], $3::text[], $4::text[], $5::int8[], $6::int8[], $7::int8[],
              $8::text[])
       WITH ORDINALITY AS o(id, attempt, outcome, error, delay_us, base_us, cap_us, output, n)
  ORDER BY id, n
), c AS MATERIALIZED (
  SELECT o.*,
         CASE
           WHEN l.id IS NOT NULL THEN
             CASE WHEN l.status = 'running'
                       AND l.attempts = o.attempt -- fence
                  THEN 'write' ELSE 'lost' END
           -- Skipped: busy if the row (as of this statement's snapshot) still passes the
           -- guard, so someone else holds it locked. A scalar subquery by id only, so that
           -- no partial index on status can be picked for it.
           WHEN (SELECT x.status = 'running'
                        AND x.attempts = o.attempt -- fence
                 FROM {schema}.jobs x WHERE x.id = o.id) THEN 'busy'
           ELSE 'lost'
         END AS verdict
  FROM o
  LEFT JOIN LATERAL (
    SELECT j.id, j.status, j.attempts
    FROM {schema}.jobs j
    WHERE j.id = o.id
    FOR UPDATE OF j SKIP LOCKED
  ) l ON true
), written AS (
  UPDATE {schema}.jobs j
  SET status       = CASE
                       WHEN c.outcome = 'complete' THEN 'done'
                       WHEN c.outcome = 'discard' THEN 'failed'
                       WHEN c.outcome IN ('snooze', 'hand_back', 'unserved') THEN 'queued'
                       WHEN j.attempts >= j.max_attempts THEN 'failed'
                       ELSE 'queued'
                     END,
      run_at       = CASE
                       WHEN c.outcome = 'hand_back' THEN j.run_at
                       WHEN c.outcome IN ('snooze', 'unserved')
                         THEN now() + c.delay_us * interval '1 microsecond'
                       WHEN c.outcome = 'retry' AND j.attempts < j.max_attempts
                         THEN now() + least(c.cap_us::float8,
                                            c.base_us::float8 * 2 ^ least(j.attempts, 60))
                                      * interval '1 microsecond'
                       ELSE j.run_at
                     END,
      max_attempts = CASE WHEN c.outcome IN ('snooze', 'hand_back', 'unserved')
                          THEN least(j.max_attempts, 2147483646) + 1
                          ELSE j.max_attempts END,
      finished_at  = CASE
                       WHEN c.outcome IN ('complete', 'discard') THEN now()
                       WHEN c.outcome = 'retry' AND j.attempts >= j.max_attempts THEN now()
                     END,
      locked_until = NULL,
      last_error   = CASE WHEN c.outcome IN ('retry', 'discard', 'unserved') THEN c.error
                          ELSE j.last_error END,
      output       = CASE WHEN c.outcome = 'complete' THEN c.output::jsonb ELSE j.output END,
      -- The attempt history (migration 14): a failed attempt appends itself, keeping the
      -- last 20; every other outcome leaves the column as it is.
      errors       = CASE WHEN c.outcome IN ('retry', 'discard') THEN
                       jsonb_path_query_array(coalesce(j.errors, '[]') || jsonb_build_array(
                         jsonb_build_object('attempt', j.attempts, 'at', now(),
                                            'error', left(c.error, 2048),
                                            'ran_ms', (extract(epoch FROM now() - j.attempted_at)
                                                       * 1000)::int8)),
                         '$[last - 19 to last]')
                       ELSE j.errors END
  FROM c
  WHERE c.verdict = 'write'
    AND j.id = c.id
  RETURNING c.n, j.status, j.run_at, j.queue,
            (extract(epoch FROM j.run_at - now()) * 1000000)::int8 AS retry_in_us
), bound AS MATERIALIZED (
  SELECT q.name, q.limit_bound
  FROM {schema}.queues q
  WHERE q.name IN (SELECT DISTINCT queue FROM written) AND q.limited
), woken AS (
  SELECT pg_notify({channel}, q.queue)
  FROM (SELECT queue FROM written WHERE status = 'queued'
        UNION
        SELECT name FROM bound WHERE limit_bound = 'slots') q
)
SELECT n, 'written' AS result, status, run_at, retry_in_us FROM written
WHERE (SELECT count(*) FROM woken) >= 0
UNION ALL
SELECT n, verdict, NULL, NULL, NULL FROM c WHERE verdict <> 'write'
