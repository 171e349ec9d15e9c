-- The highest applied migration (0 when none).
SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations
