-- The lab's vacuum experiment: vacuum the jobs table, so that the experiment starts from a
-- table with no dead rows.
VACUUM {schema}.jobs
