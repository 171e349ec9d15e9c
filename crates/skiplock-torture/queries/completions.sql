-- Every completion: the job, the `attempts` of the row version that became `done` (which
-- the fence makes the attempt that wrote it), and when, in epoch milliseconds.
SELECT job_id, attempts,
        floor(extract(epoch FROM at) * 1000)::int8
 FROM torture.lab_completions
