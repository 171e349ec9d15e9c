-- The flow jobs by state, to wait for the end and to say what is left when it does not come.
SELECT status, coalesce(held, ''), count(*) FROM torture.jobs GROUP BY 1, 2 ORDER BY 1, 2
