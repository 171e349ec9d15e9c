-- Set the limits of queue $1 (migration 11): $2 concurrency, $3 per key, $4 starts per
-- $5 microseconds (a sliding window); NULL lifts that limit. $6 says who set them (free text,
-- or NULL). Any valid queue name, with jobs or not yet. Returns the queue's name.
--
-- Every claim of the queue reads its row, so the limits hold for every worker of every
-- process from the moment this commits, for every claim that starts after that; a claim in
-- flight then may still start what the old limits allowed. Lowering a limit below what runs
-- stops nothing: the running jobs finish, and no job starts until the count is below it.
-- The notification (the queue's name, at commit) makes listening workers claim at once, so
-- that a raised or lifted limit takes effect without waiting for a freed slot or the poll.
-- When the rate limit is lifted, its window's starts are forgotten.
WITH forget AS (
  DELETE FROM {schema}.queue_starts s WHERE s.queue = $1 AND $4::int4 IS NULL
  RETURNING 1
)
INSERT INTO {schema}.queues AS q (name, concurrency, per_key, rate_limit, rate_period_us,
                                   limits_by)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (name) DO UPDATE
SET concurrency    = excluded.concurrency,
    per_key        = excluded.per_key,
    rate_limit     = excluded.rate_limit,
    rate_period_us = excluded.rate_period_us,
    limits_by      = excluded.limits_by,
    limit_bound    = NULL
RETURNING q.name,
          (SELECT count(*) FROM forget) AS forgotten,
          pg_notify({channel}, q.name)::text AS notified
