-- The flow handler's check, in its own transaction: how many parents job $1 records
-- (jobs.after) and how many of those are not done, as this statement sees them.
SELECT coalesce(cardinality(c.after), 0)::int8,
       (SELECT count(*) FROM torture.jobs p
         WHERE p.id = ANY (c.after) AND p.status <> 'done')
FROM torture.jobs c
WHERE c.id = $1
