-- Ends about half of the workers' connections, LISTEN ones included.
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND (application_name LIKE 'torture-typed-%'
        OR application_name IN ('skiplock-cli', 'skiplock-listener'))
   AND random() < 0.5
