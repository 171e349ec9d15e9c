-- What the bystander reads before it sits idle in its transaction.
SELECT count(*) FROM torture.jobs
