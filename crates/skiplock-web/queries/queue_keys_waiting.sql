-- The keys at their per-key limit that have ready jobs, in the queues with a per-key limit
-- (migration 11): per queue the $4 with the most ready jobs, at most $5 rows in all. For each:
-- its running jobs, and its ready and waiting (queued, not held, due or not) jobs among the
-- first $3 of its queued rows (a count of $3 waiting means "at least").
--
-- Bounded whatever the backlog: the keys at their limit are found among the running jobs
-- with a key and a lease (jobs_slots_idx; as in the claim's count, a running row without a
-- lease, which only a hand-written UPDATE makes, holds no slot), at most $1 of them, which
-- is where a full key shows; at most $2 such keys are looked at (by queue and key), and each
-- reads at most $3 entries of jobs_key_ready_idx (queued rows that are not held, led by queue
-- and key). So the statement reads at most $1 + $2 * $3 rows, never a queue's whole backlog.
-- A cancelled job that still holds its slot until its lease ends is not counted here (the
-- claim counts it): a key can show as below its limit for that long. `considered` is how many keys at their limit were found.
WITH per_key AS (
  SELECT name, per_key FROM {schema}.queues WHERE per_key IS NOT NULL
),
running AS (
  SELECT queue, key FROM {schema}.jobs
  WHERE status = 'running' AND key IS NOT NULL AND locked_until IS NOT NULL
  LIMIT $1
),
full_keys AS (
  SELECT r.queue, r.key, count(*) AS running, p.per_key
  FROM running r
  JOIN per_key p ON p.name = r.queue
  GROUP BY r.queue, r.key, p.per_key
  HAVING count(*) >= p.per_key
),
looked AS (
  SELECT * FROM full_keys ORDER BY queue, key LIMIT $2
),
counted AS (
  SELECT l.queue, l.key, l.running, l.per_key, w.ready, w.waiting,
         row_number() OVER (PARTITION BY l.queue ORDER BY w.ready DESC, l.key) AS rank
  FROM looked l
  CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.run_at <= now() AND j.attempts < j.max_attempts) AS ready,
           count(*) AS waiting
    FROM (SELECT j.run_at, j.attempts, j.max_attempts FROM {schema}.jobs j
          WHERE j.queue = l.queue AND j.key = l.key AND j.status = 'queued' AND j.held IS NULL
          LIMIT $3) j
  ) w
  WHERE w.ready > 0
)
SELECT queue, key, running, per_key, ready, waiting,
       (SELECT count(*) FROM full_keys) AS considered
FROM counted
WHERE rank <= $4
ORDER BY queue, rank
LIMIT $5
