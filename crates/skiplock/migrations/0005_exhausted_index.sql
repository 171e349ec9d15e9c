-- skiplock migration 5: find queued jobs that have no attempt left.
--
-- A queued row with attempts >= max_attempts (an edited row, or one requeued by hand) is
-- never claimed (the claim skips it) and never reaped as a lease: the reaper moves it to
-- `failed`. This partial index lets it find such rows without a scan; it is empty almost
-- always, so it costs nearly nothing to keep.
CREATE INDEX jobs_exhausted_idx ON {schema}.jobs (id)
  WHERE status = 'queued' AND attempts >= max_attempts;
