-- The sequences with held jobs (migration 11: queued jobs waiting for their turn in their
-- sequence): per queue the $2 with the most held jobs, at most $3 rows in all. For each: its
-- held jobs in that queue, and the member it waits for (the active one: queued and not held,
-- or running; NULL when there is none), with that member's state.
--
-- Bounded: at most $1 held rows are read (the held rows' own index), so the counts are lower
-- bounds when `read` reaches $1; the active member is one probe of jobs_sequence_idx per
-- sequence shown.
WITH held AS (
  SELECT queue, sequence FROM {schema}.jobs
  WHERE held IS NOT NULL AND status = 'queued'
  LIMIT $1
),
seqs AS (
  SELECT queue, sequence, count(*) AS held,
         row_number() OVER (PARTITION BY queue ORDER BY count(*) DESC, sequence) AS rank
  FROM held
  WHERE sequence IS NOT NULL
  GROUP BY queue, sequence
)
SELECT s.queue, s.sequence, s.held, a.id AS active_id, a.status AS active_status,
       (SELECT count(*) FROM held) AS read
FROM seqs s
LEFT JOIN LATERAL (
  SELECT j.id, j.status FROM {schema}.jobs j
  WHERE j.sequence = s.sequence AND j.held IS NULL AND j.status IN ('queued', 'running')
  ORDER BY j.id
  LIMIT 1
) a ON true
WHERE s.rank <= $2
ORDER BY s.queue, s.rank
LIMIT $3
