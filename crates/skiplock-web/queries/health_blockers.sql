-- Sessions of this database that hold back the xmin horizon, so that vacuum cannot remove
-- dead rows: an open transaction that is idle, or older than $1 microseconds. The same test
-- as the library's health_blockers.sql (backend_xmin for a snapshot, backend_xid once it has
-- written), oldest first, at most $2.
SELECT pid,
       coalesce(usename::text, '')                                 AS usename,
       coalesce(application_name, '')                              AS application_name,
       coalesce(client_addr::text, 'local')                        AS client,
       coalesce(state, '')                                         AS state,
       greatest(age(backend_xmin), age(backend_xid))::int8         AS xmin_age,
       extract(epoch FROM now() - xact_start)::float8              AS xact_age_s,
       extract(epoch FROM now() - state_change)::float8            AS state_age_s,
       left(coalesce(query, ''), 500)                              AS query
FROM pg_stat_activity
WHERE datname = current_database()
  AND pid <> pg_backend_pid()
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
  AND xact_start IS NOT NULL
  AND (state LIKE 'idle in transaction%'
       OR now() - xact_start > $1::int8 * interval '1 microsecond')
ORDER BY greatest(age(backend_xmin), age(backend_xid)) DESC
LIMIT $2
