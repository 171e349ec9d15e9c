-- Whether queue $1 is paused, and why the last claim of a limited queue left ready jobs
-- behind (`bound`: 'slots' or 'rate', see job_next_run_at.sql; NULL when it did not, or
-- while paused): one primary-key probe of `queues`, no job row read, however many jobs the
-- queue has or has just run. A draining worker whose claim found nothing asks this before
-- it stops (only a rate-bound queue then asks job_next_run_at.sql for the wait), and
-- `skiplock work --drain` asks it before it says that a queue is paused.
SELECT coalesce(bool_or(paused), false)               AS paused,
       max(CASE WHEN NOT paused THEN limit_bound END) AS bound
FROM {schema}.queues
WHERE name = $1
