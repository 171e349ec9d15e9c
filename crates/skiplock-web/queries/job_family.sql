-- A job's family, for its page: the jobs job $1 waits for (its parents, from jobs.after) and
-- the jobs that wait for it (its children, through the primary key of job_deps), each with
-- its state; at most $2 of each, lowest ids first. A parent deleted since has a NULL status
-- (its id stays in jobs.after). `rel` is 'parent' or 'child'; `cancelled` tells a cancelled
-- failure from another.
(SELECT 'parent' AS rel, p.id, j.status, j.kind, j.queue, j.held,
        j.last_error = 'cancelled' AS cancelled
 FROM unnest((SELECT x.after FROM {schema}.jobs x WHERE x.id = $1)) AS p(id)
 LEFT JOIN {schema}.jobs j ON j.id = p.id
 WHERE p.id IS NOT NULL
 ORDER BY p.id
 LIMIT $2)
UNION ALL
(SELECT 'child', c.child, j.status, j.kind, j.queue, j.held,
        j.last_error = 'cancelled'
 FROM (SELECT d.child FROM {schema}.job_deps d
       WHERE d.parent = $1 ORDER BY d.child LIMIT $2) c
 LEFT JOIN {schema}.jobs j ON j.id = c.child
 ORDER BY c.child
 LIMIT $2)
