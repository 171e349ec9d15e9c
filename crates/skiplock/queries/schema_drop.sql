-- Drop the schema and everything in it (the lab's and the demo's scratch schemas).
DROP SCHEMA IF EXISTS {schema} CASCADE
