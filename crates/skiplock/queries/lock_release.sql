-- Release maintenance lock $1 if holder $2 has it.
DELETE FROM {schema}.maintenance_locks WHERE name = $1 AND holder = $2
