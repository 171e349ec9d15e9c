-- The active (queued or running) job holding each unique key of $1, if any: the duplicate an
-- enqueue skipped. Returns the key and the job's id. One probe of jobs_unique_idx per key
-- (the index allows at most one active job per key).
SELECT j.unique_key, j.id
FROM unnest($1::text[]) AS o(ukey)
JOIN {schema}.jobs j
  ON j.unique_key = o.ukey
 AND j.unique_key IS NOT NULL
 AND j.status IN ('queued', 'running')
