-- Serialise migrations of one schema across processes: a transaction-scoped advisory lock
-- (released at COMMIT or ROLLBACK; no session state, so it also works through PgBouncer in
-- transaction mode). $1 is a 64-bit key derived from the schema name.
SELECT pg_advisory_xact_lock($1::int8)
