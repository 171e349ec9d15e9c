-- What job $1's attempt $2 found wrong when it ran (written outside its transaction).
INSERT INTO torture.violations (job_id, attempt, detail) VALUES ($1, $2, $3)
