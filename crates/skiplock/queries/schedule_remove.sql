-- Remove a schedule by name. Jobs it already enqueued stay.
DELETE FROM {schema}.schedules WHERE name = $1
