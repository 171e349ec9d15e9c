-- Enqueue many jobs in one statement. Returns their ids in input order.
--
-- One array per column (never one bind parameter per value: the protocol allows at most
-- 65,535 parameters per statement, unnest has no such limit). The columns are those of
-- job_insert.sql, in the same order; a job's parents (`after`) come as the text of an
-- array (`{1,2}`), since an array of arrays must be rectangular. The statement-level trigger sends one notification per
-- distinct queue, however many rows this inserts.
INSERT INTO {schema}.jobs (queue, kind, payload, priority, max_attempts, run_at, key, sequence,
                           after)
SELECT j.queue, j.kind, j.payload::jsonb, j.priority, j.max_attempts,
       coalesce('epoch'::timestamptz + j.run_at_us * interval '1 microsecond',
                now() + j.delay_us * interval '1 microsecond'),
       j.key, j.sequence, j.after::int8[]
FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int4[], $6::int8[], $7::int8[],
            $8::text[], $9::text[], $10::text[])
     WITH ORDINALITY AS j(queue, kind, payload, priority, max_attempts, run_at_us, delay_us,
                          key, sequence, after, n)
ORDER BY j.n
RETURNING id
