-- Every job at the end: its state, its attempts (claims), and the parents it records.
SELECT id, status, attempts, coalesce(after, '{}') FROM torture.jobs ORDER BY id
