-- The article's result table for one queue: jobs per status and the most attempts any of
-- them took. $1 queue.
SELECT status, count(*) AS count, max(attempts) AS max_attempts
FROM {schema}.jobs
WHERE queue = $1
GROUP BY status
ORDER BY status
