SELECT id, (payload->>'n')::int8, status, attempts FROM torture.jobs ORDER BY id
