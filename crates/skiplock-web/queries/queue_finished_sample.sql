-- An estimate of the done and failed jobs of the queues $2 (those whose bounded count in
-- queue_finished.sql passed its bound), at most $3 rows: the finished rows on a sample of
-- about $1 of the jobs table's pages (SYSTEM sampling: each page with the same chance; the
-- whole table when it has fewer pages), divided by that chance. The chance comes from the
-- table's size now (pg_relation_size), not from its statistics, so the estimate holds on a
-- table that grew or shrank since its last ANALYZE. The same seed each time: the same pages
-- while the table keeps its size, so that the figure does not jitter between refreshes and
-- the pages stay cached. $4 the schema name.
WITH size AS (
  SELECT greatest(pg_relation_size(c.oid) / current_setting('block_size')::int8, 1)::float8
           AS pages
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = $4::text AND c.relname = 'jobs'
),
chance AS (
  SELECT least(1.0, $1::float8 / pages) AS p FROM size
)
SELECT j.queue, j.status, (count(*) / (SELECT p FROM chance))::float8 AS estimate
FROM {schema}.jobs j TABLESAMPLE SYSTEM ((SELECT 100.0 * p FROM chance)) REPEATABLE (0)
WHERE j.status IN ('done', 'failed') AND j.queue = ANY($2::text[])
GROUP BY j.queue, j.status
LIMIT $3
