-- The LISTEN connection's self-test: a notification on the jobs channel ($1) with a payload
-- ($2, 'probe:<random>') that only the worker that sent it acts on. The worker sends it from
-- a pooled connection, not from the listening one: through a transaction-pooling proxy the
-- listening client's own statement may run on the very server connection that ran LISTEN
-- and get its notification straight back, hiding that nothing is heard between statements.
SELECT pg_notify($1, $2)
