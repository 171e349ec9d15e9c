-- skiplock migration 10: an index of finished jobs by queue, state and finish time.
--
-- The dashboard counts each queue's done and failed jobs, and those finished in the last
-- minute, up to a bound (10,000 by default) through this index: a bounded count reads at
-- most that many entries, however many finished jobs the table keeps, and the list of queues
-- with finished jobs is a skip along its first column (one descent per queue). Without it,
-- such a count reads the table until it finds its rows, which on a large table is all of it.
--
-- It costs one index entry per job that finishes (the completion's UPDATE changes `status`,
-- which partial indexes name, so it is never a HOT update and already writes the primary key's
-- entry). Built inside the migration's transaction: on a large table the build reads the
-- table once (writes wait meanwhile). To keep writing meanwhile, create it beforehand with
-- CREATE INDEX CONCURRENTLY under this name and with this definition (and check that it is
-- valid): the migration then keeps it.
CREATE INDEX IF NOT EXISTS jobs_finished_idx ON {schema}.jobs (queue, status, finished_at)
  WHERE status IN ('done', 'failed');
