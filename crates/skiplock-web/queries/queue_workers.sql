-- Per queue, the live workers serving it (migration 14): workers not gone (running or
-- sleeping, as worker_list.sql tells them), whose `queues` names the queue. At most $1
-- queues, by name. The table holds one row per worker running or started in the last day,
-- and the statement reads it whole.
SELECT q.queue, count(*)::int8 AS workers
FROM {schema}.workers w
CROSS JOIN LATERAL jsonb_object_keys(
  CASE WHEN jsonb_typeof(w.queues) = 'object' THEN w.queues ELSE '{}'::jsonb END
) AS q(queue)
WHERE w.stopped_at IS NULL
  AND (w.poll_off
       OR w.last_seen >= now() - w.heartbeat - greatest(w.heartbeat, interval '2 seconds'))
GROUP BY q.queue
ORDER BY q.queue
LIMIT $1
