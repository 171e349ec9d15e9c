-- Stop waiting on queue $1 (the worker is busy claiming): release the stripes this session
-- holds ($2; see queue_wait.sql, whose key this is). How many it released.
SELECT count(*) FILTER (WHERE pg_advisory_unlock_shared(
         hashtextextended({channel} || '/waiting/' || $1 || '/' || s, 0)))
FROM unnest($2::int4[]) AS s
