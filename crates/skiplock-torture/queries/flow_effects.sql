-- Every effect at the end: its job and attempt, when it was written, and when the
-- transaction that wrote it committed (track_commit_timestamp), in epoch microseconds.
SELECT job_id, attempt,
       floor(extract(epoch FROM at) * 1000000)::int8,
       floor(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8
FROM torture.effects
