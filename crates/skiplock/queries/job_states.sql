-- The status of each job among $1 that exists (to explain what an admin call did not do).
-- One primary-key probe per id (LATERAL), as in the admin statements.
SELECT l.id, l.status
FROM unnest($1::int8[]) AS o(id)
CROSS JOIN LATERAL (SELECT j.id, j.status FROM {schema}.jobs j WHERE j.id = o.id) l
