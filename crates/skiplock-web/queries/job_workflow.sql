-- The workflow of job $1, for its graph: the jobs connected to it through dependencies in
-- either direction (children through the primary key of job_deps, parents through
-- jobs.after), walked breadth first from it, so that the nearest come first; at most $2 of
-- them, and how many the walk reaches, counted up to $3 (`total`).
--
-- The walk is a recursive query whose UNION drops every job already reached, so it ends on
-- any graph (a walk in both directions goes back and forth over every edge), and its readers
-- stop it: the CTE is evaluated only as far as they read, $3 rows at most. A parent deleted
-- since (its id stays in its children's jobs.after) is reached, with a NULL status, and
-- leads nowhere. Each step reads a job's children through job_deps' primary key (parent,
-- child) and its parents from its row's jobs.after. For each job, `parents`: those of its parents that are among the jobs
-- returned (the graph's edges); `cancelled` tells a cancelled failure from another.
WITH RECURSIVE walk(id) AS (
  SELECT $1::int8
  UNION
  SELECT n.id
  FROM walk w
  CROSS JOIN LATERAL (
    SELECT d.child AS id FROM {schema}.job_deps d WHERE d.parent = w.id
    UNION ALL
    SELECT p.id FROM {schema}.jobs j CROSS JOIN unnest(j.after) AS p(id)
    WHERE j.id = w.id AND p.id IS NOT NULL
  ) n
), total AS (
  SELECT count(*)::int8 AS n FROM (SELECT 1 FROM walk LIMIT $3) t
), shown AS (
  SELECT id FROM walk LIMIT $2
)
SELECT s.id, j.status, j.kind, j.queue, j.held,
       j.last_error = 'cancelled'                         AS cancelled,
       ARRAY(SELECT p.id FROM unnest(j.after) AS p(id)
             WHERE p.id IN (SELECT id FROM shown))        AS parents,
       (SELECT n FROM total)                              AS total
FROM shown s
LEFT JOIN {schema}.jobs j ON j.id = s.id
ORDER BY s.id
LIMIT $2
