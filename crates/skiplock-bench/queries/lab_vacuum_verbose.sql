-- The lab's vacuum experiment: vacuum the jobs table and report (as notices) how many dead
-- row versions could not be removed yet.
VACUUM (VERBOSE) {schema}.jobs
