-- What the handlers found wrong, first ones first.
SELECT job_id, attempt, detail FROM torture.violations ORDER BY at
