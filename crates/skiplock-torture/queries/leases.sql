-- Each attempt's last lease deadline, in epoch milliseconds (rounded down, as the logs are).
SELECT job_id, attempts,
        floor(extract(epoch FROM max(locked_until)) * 1000)::int8
 FROM torture.lab_leases GROUP BY job_id, attempts
