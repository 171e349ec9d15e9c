-- Sessions of this database that hold back the xmin horizon, so that vacuum cannot remove
-- dead rows (of the jobs table or any other): an open transaction that is idle, or older than
-- $1 microseconds. A transaction holds the horizon back with its snapshot (backend_xmin) or,
-- once it has written, with its own transaction id (backend_xid) - an idle READ COMMITTED
-- transaction that wrote has no snapshot but still holds it. Oldest first, at most $2.
-- Also run by the dashboard's health page (through `Client::statement`).
SELECT pid,
       coalesce(usename::text, '')                                 AS usename,
       coalesce(application_name, '')                              AS application_name,
       coalesce(client_addr::text, 'local')                        AS client,
       coalesce(state, '')                                         AS state,
       greatest(age(backend_xmin), age(backend_xid))::int8          AS xmin_age,
       extract(epoch FROM now() - xact_start)::float8              AS xact_age_s,
       extract(epoch FROM now() - state_change)::float8            AS state_age_s,
       left(coalesce(query, ''), 200)                              AS query
FROM pg_stat_activity
WHERE datname = current_database()
  AND pid <> pg_backend_pid()
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
  AND xact_start IS NOT NULL
  AND (state LIKE 'idle in transaction%'
       OR now() - xact_start > $1::int8 * interval '1 microsecond')
ORDER BY greatest(age(backend_xmin), age(backend_xid)) DESC
LIMIT $2
