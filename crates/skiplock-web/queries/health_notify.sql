-- How full the server's notification queue is (0 to 1): when it fills, a transaction that
-- notifies (an enqueue's wake-up) fails at commit. It fills when a listening session stops
-- reading (for instance one left idle in a transaction).
SELECT pg_notification_queue_usage()::float8 AS usage
LIMIT 1
