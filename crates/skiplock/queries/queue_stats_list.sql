-- The per-queue, per-minute rollup since $1 (Client::queue_stats), oldest first; by the
-- minute index.
SELECT queue, minute, done, failed, available, scheduled, running
FROM {schema}.queue_stats
WHERE minute >= $1
ORDER BY minute, queue
