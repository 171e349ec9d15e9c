-- The attempt history of job $1 (migration 14's `errors`: its failed attempts, newest last),
-- at most $2 entries: each attempt's number, when it ended (epoch seconds), how long it ran
-- (milliseconds) and its error cut at $3 characters. An entry's field of the wrong JSON type
-- reads as NULL, and an `errors` that is not an array as no entry.
SELECT CASE WHEN jsonb_typeof(e.v -> 'attempt') = 'number'
            THEN (e.v ->> 'attempt')::numeric::int8 END          AS attempt,
       CASE WHEN jsonb_typeof(e.v -> 'at') = 'string'
            THEN extract(epoch FROM (e.v ->> 'at')::timestamptz)::float8 END AS at,
       CASE WHEN jsonb_typeof(e.v -> 'ran_ms') = 'number'
            THEN (e.v ->> 'ran_ms')::float8 END                  AS ran_ms,
       left(e.v ->> 'error', $3::int4)                           AS error
FROM {schema}.jobs j
CROSS JOIN LATERAL jsonb_array_elements(
  CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]'::jsonb END
) WITH ORDINALITY AS e(v, n)
WHERE j.id = $1::int8
ORDER BY e.n
LIMIT $2
