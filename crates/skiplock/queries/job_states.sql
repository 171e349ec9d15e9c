-- The status of each job among $1 that exists (to explain what an admin call did not do).
SELECT id, status FROM {schema}.jobs WHERE id = ANY($1::int8[])
