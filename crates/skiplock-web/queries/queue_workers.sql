-- Per queue, the live workers serving it (migration 14): workers not gone, as in
-- worker_list.sql ($1 the same number of heartbeat intervals), whose `queues` names the
-- queue. At most $2 queues, by name. The table holds one row per worker started, and the
-- statement reads it whole.
SELECT q.queue, count(*)::int8 AS workers
FROM {schema}.workers w
CROSS JOIN LATERAL jsonb_object_keys(
  CASE WHEN jsonb_typeof(w.queues) = 'object' THEN w.queues ELSE '{}'::jsonb END
) AS q(queue)
WHERE w.stopped_at IS NULL
  AND (w.poll_off OR w.last_seen >= now() - w.heartbeat * $1::float8)
GROUP BY q.queue
ORDER BY q.queue
LIMIT $2
