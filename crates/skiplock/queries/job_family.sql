-- The jobs job $1 waits for (its parents, from jobs.after) and the jobs that wait for it
-- (its children, from job_deps), each with its state; at most $2 children, lowest ids first.
-- A parent deleted since has a NULL status. `rel` is 'parent' or 'child'; `satisfied` tells
-- whether that edge is settled (the parent is done).
SELECT 'parent' AS rel, p.id, j.status, j.kind, j.queue, j.held,
       coalesce(d.satisfied, false) AS satisfied
FROM unnest((SELECT x.after FROM {schema}.jobs x WHERE x.id = $1)) AS p(id)
LEFT JOIN {schema}.jobs j ON j.id = p.id
LEFT JOIN {schema}.job_deps d ON d.parent = p.id AND d.child = $1
UNION ALL
SELECT 'child', c.child, j.status, j.kind, j.queue, j.held, c.satisfied
FROM (SELECT d.child, d.satisfied FROM {schema}.job_deps d
      WHERE d.parent = $1 ORDER BY d.child LIMIT $2) c
LEFT JOIN {schema}.jobs j ON j.id = c.child
