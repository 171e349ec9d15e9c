-- Record one applied migration. $1 version, $2 name.
INSERT INTO {schema}.schema_migrations (version, name) VALUES ($1, $2)
