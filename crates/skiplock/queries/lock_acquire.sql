-- Take maintenance lock $1 for holder $2 for $3 microseconds: succeeds (returns a row) when
-- the lock is free, expired, or already this holder's (which renews it).
INSERT INTO {schema}.maintenance_locks AS l (name, holder, expires_at)
VALUES ($1, $2, now() + $3::int8 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
  SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
  WHERE l.expires_at < now() OR l.holder = EXCLUDED.holder
RETURNING holder
