-- One effect of job $1's attempt $2.
INSERT INTO torture.effects (job_id, attempt) VALUES ($1, $2)
