-- Whether the migrations table exists, read from the catalog so that it needs no privilege
-- and takes no lock: `migrate` on a current schema then runs no DDL at all (a worker role
-- without CREATE can run it). $1 is the schema's name, unquoted.
SELECT EXISTS (
  SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = 'schema_migrations'
)
