-- The ids of the jobs matching `skiplock jobs`' filters, newest first, at most $10 below the
-- cursor $7: what `skiplock retry`, `cancel` and `delete` with a filter count and then act
-- on, a batch at a time (ids only, so that a batch's memory does not grow with payloads).
-- They give every statement a window of ids ($5 to $6, a range of the primary key, at most
-- a bounded number of ids wide), so that it reads no more rows than its window, whatever
-- the statistics say: a backward scan from the cursor alone could read the whole table per
-- batch when a plan sorts instead (tested by `crates/skiplock-cli/tests/bulk.rs`
-- `a_window_reads_only_its_rows_with_stale_statistics`).
-- The parameters are jobs_list.sql's, and so are the FROM and WHERE clauses, word for word
-- (tested by `crates/skiplock-cli/tests/bulk.rs` `the_match_is_the_listing`): the jobs a
-- bulk action touches are the jobs `skiplock jobs` lists with the same filters.
SELECT j.id
FROM {schema}.jobs j
CROSS JOIN LATERAL (
  SELECT CASE
           WHEN j.status = 'queued' AND j.held IS NOT NULL THEN 'waiting'
           WHEN j.status = 'queued' AND j.attempts > 0 AND j.last_error IS NOT NULL
             THEN 'retrying'
           WHEN j.status = 'queued' AND j.run_at > now() THEN 'scheduled'
           WHEN j.status = 'queued' THEN 'available'
           WHEN j.status = 'failed' AND j.last_error = 'cancelled' THEN 'cancelled'
           ELSE j.status
         END AS state
) s
WHERE ($1::text[] IS NULL OR j.status = ANY ($1::text[]))
  AND ($2::text[] IS NULL OR s.state = ANY ($2::text[]))
  AND ($3::text IS NULL OR j.queue = $3::text)
  AND ($4::text IS NULL OR j.kind = $4::text)
  AND ($5::int8 IS NULL OR j.id >= $5::int8)
  AND ($6::int8 IS NULL OR j.id <= $6::int8)
  AND ($7::int8 IS NULL OR j.id < $7::int8)
  AND ($8::int8 IS NULL OR j.created_at < now() - $8::int8 * interval '1 microsecond')
  AND ($9::int8 IS NULL OR j.created_at > now() - $9::int8 * interval '1 microsecond')
ORDER BY j.id DESC
LIMIT $10::int8
