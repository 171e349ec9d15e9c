-- Enqueue one job. Returns its id.
--
-- $1 queue, $2 kind, $3 payload (JSON text, validated by the caller), $4 priority,
-- $5 max_attempts, $6 run_at in microseconds since the Unix epoch (NULL: use the delay),
-- $7 delay in microseconds from the database's now() (0: ready at once), $8 the job's key
-- (NULL: none), $9 its sequence (NULL: none; the insert trigger of migration 11 holds it
-- behind its sequence's active member), $10 the ids of the jobs it waits for (NULL: none;
-- the insert trigger of migration 13 checks, locks and counts them, and holds the job until
-- they are done).
-- Times come from the database clock, never the caller's, unless an absolute run_at is given.
INSERT INTO {schema}.jobs (queue, kind, payload, priority, max_attempts, run_at, key, sequence,
                           after)
VALUES (
  $1, $2, $3::text::jsonb, $4, $5,
  coalesce('epoch'::timestamptz + $6::int8 * interval '1 microsecond',
           now() + $7::int8 * interval '1 microsecond'),
  $8, $9, $10::int8[]
)
RETURNING id
