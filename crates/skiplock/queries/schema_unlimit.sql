-- Migrations may wait for locks and take long on big tables: lift the connection's
-- statement and lock timeouts for the migration transaction only (SET LOCAL, so nothing
-- outlives it, even through PgBouncer).
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = 0
