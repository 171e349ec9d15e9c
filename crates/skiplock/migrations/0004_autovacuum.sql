-- skiplock migration 4: autovacuum settings for a queue table.
--
-- Every claim and every completion leaves a dead row version behind, so a queue table
-- produces dead tuples at twice its job rate. With the defaults (vacuum once 20% of the
-- table is dead) a table that keeps a week of finished jobs would wait for hundreds of
-- thousands of dead tuples; vacuum it after a small, fixed number instead, and analyze it
-- often enough that the planner keeps using the ready index.
ALTER TABLE {schema}.jobs SET (
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02
);
