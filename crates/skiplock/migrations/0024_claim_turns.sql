-- skiplock migration 24: a claim waits for its turn without holding back the horizon.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: claim_in_turn() (migrations 16, 19 and 23) waited for the queue's advisory lock
-- inside its SELECT, and a SELECT takes its snapshot before it runs: every claim queued for
-- the turn held a snapshot from before the claims ahead of it committed. While any such
-- snapshot is open, the ready-index entries of the rows those claims took are not yet dead
-- to everyone, so no scan can mark them dead, and each claim from the front walks them all
-- again, visiting each one's heap row. Measured on two cores (100,000 no-op jobs, eight
-- `skiplock work` processes of concurrency 25): about three claims waiting at any moment,
-- each with a snapshot, and 9.4 ready-index entries read per job claimed, against 3.0 for
-- one process of 200.
--
-- LOCK is the one statement that waits for a lock without taking a snapshot. A claim in turn
-- is now a short transaction, sent in one round trip: BEGIN and LOCK of the queue's turn
-- (one of the sixteen views below, in EXCLUSIVE mode: claims in turn on the same view take
-- turns; nothing else locks them), then job_claim.sql itself, then COMMIT
-- (`job_claim_turn_try.sql`, `job_claim_in_turn.sql`, `job_claim_turn_end.sql`). The
-- claim's snapshot is taken once its turn has come. With eight processes the entries read
-- fell to 4.4 per job (the open completions' snapshots account for most of the rest).
--
-- The views hold nothing and lead to nothing (`SELECT` with no table): they exist to be
-- locked. A queue's turn is `claim_turn_<n>`, n its name's 64-bit FNV-1a hash modulo 16
-- (`skiplock::claim_turn`): two queues share a turn one time in sixteen, and their claims in
-- turn then take turns with each other. LOCK in EXCLUSIVE mode needs UPDATE (or DELETE or
-- TRUNCATE) on the view: granted to PUBLIC here, so that every role that may use the schema
-- (USAGE on it) can take its turn; none of them can read or write anything through them.
--
-- claim_in_turn() stays, for workers of an older version during an upgrade: their claims
-- and the new ones do not take turns with each other until the old ones stop (claims then
-- step past each other's rows, as claims did before migration 16; nothing is claimed
-- twice).

DO $$
BEGIN
  FOR n IN 0..15 LOOP
    EXECUTE format('CREATE OR REPLACE VIEW {schema}.%I AS SELECT', 'claim_turn_' || n);
    EXECUTE format('COMMENT ON VIEW {schema}.%I IS %L', 'claim_turn_' || n,
                   'skiplock: locked (never read) by the claims in turn of the queues whose '
                   || 'turn it is; see migration 24');
    EXECUTE format('GRANT UPDATE ON {schema}.%I TO PUBLIC', 'claim_turn_' || n);
  END LOOP;
END
$$;
