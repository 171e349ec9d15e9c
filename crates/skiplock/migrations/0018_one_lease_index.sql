-- skiplock migration 18: one index for the reaper and the flow-control slots.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: a job's claim is a new row version, and each index whose predicate the running row
-- satisfies gets an entry: the primary key, jobs_lease_idx (locked_until, for the reaper and
-- the earliest lease) and jobs_slots_idx (queue and key, for the slot counts of limited
-- queues). Measured in pgbench on the worker's claim in turn and completion (two clients,
-- seven alternating pairs of runs of 100,000 jobs on one cluster): 57,400 jobs/s on average
-- with the two indexes, 60,000 with the one below; the share of the server's time spent
-- inserting index entries went from 30.5% to 25.2% (perf).
--
-- Now a running job has one entry besides its primary key's, in jobs_lease_idx, led by the
-- queue: (queue, locked_until), over the rows that hold a slot (running, or cancelled with a
-- lease that has not been released: job_cancel.sql keeps it), the predicate jobs_slots_idx
-- had. It serves
--   * a limited queue's count of its slots in use (claim_limited(): the rows of the queue,
--     one descent);
--   * the reaper (job_reap.sql: queue by queue, each queue's leases in the order they end,
--     up to the first that has not; the index holds the running jobs and the cancelled ones
--     still holding a slot, not the queued backlog nor the finished history);
--   * the earliest lease (job_next_lease.sql: the first entry of each queue, one descent per
--     queue that has such rows);
--   * the running jobs' counts and a queue's existence (queue_list.sql, queue_known.sql, the
--     dashboard's queue_active.sql).
-- jobs_slots_idx keeps (queue, key) for the per-key counts, over the rows with a key only:
-- a job without a key no longer writes an entry in it.
--
-- A running row without a lease (written by hand: every claim of the library sets one) is in
-- neither; jobs_leaseless_idx, empty unless such rows exist, lets the counts find it.
--
-- A cancelled job's lease is released by the reaper once it has ended (job_reap.sql sets
-- its locked_until to NULL): until then it holds its slot; after that it leaves both indexes,
-- so that they hold the running jobs and the few cancelled ones still holding a slot instead
-- of every job ever cancelled while it ran.
--
-- The new indexes are built inside this migration's transaction: on a large table each build
-- reads the table once (writes wait meanwhile). To keep writing meanwhile, create them
-- beforehand with CREATE INDEX CONCURRENTLY under the names jobs_lease_v18_idx,
-- jobs_slots_v18_idx and jobs_leaseless_idx with these definitions: the migration then keeps
-- them (one that is not valid, from a build that failed, is built again;
-- it::migrate::migration_18_keeps_a_lease_index_built_concurrently_beforehand).

-- Any v18 index that exists here and is not valid (a CONCURRENTLY build that failed) is
-- built again.
DO $$
DECLARE
  i text;
BEGIN
  FOREACH i IN ARRAY ARRAY['jobs_lease_v18_idx', 'jobs_slots_v18_idx', 'jobs_leaseless_idx'] LOOP
    IF EXISTS (SELECT 1 FROM pg_index x
               WHERE x.indexrelid = to_regclass('{schema}.' || i) AND NOT x.indisvalid) THEN
      EXECUTE format('DROP INDEX {schema}.%I', i);
    END IF;
  END LOOP;
END
$$;

CREATE INDEX IF NOT EXISTS jobs_lease_v18_idx ON {schema}.jobs (queue, locked_until)
  WHERE status IN ('running', 'failed') AND locked_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_slots_v18_idx ON {schema}.jobs (queue, key)
  WHERE key IS NOT NULL AND status IN ('running', 'failed') AND locked_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_leaseless_idx ON {schema}.jobs (queue)
  WHERE status = 'running' AND locked_until IS NULL;

DROP INDEX IF EXISTS {schema}.jobs_lease_idx;
DROP INDEX IF EXISTS {schema}.jobs_slots_idx;
ALTER INDEX {schema}.jobs_lease_v18_idx RENAME TO jobs_lease_idx;
ALTER INDEX {schema}.jobs_slots_v18_idx RENAME TO jobs_slots_idx;
