SELECT count(*) FROM torture.jobs
 WHERE (payload->>'n')::int8 >= $1 AND (payload->>'n')::int8 < $2
