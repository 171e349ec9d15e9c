-- skiplock migration 3: enqueue from SQL, so that triggers and any language can add
-- jobs with the same checks as the library:
--
--   SELECT skiplock.enqueue('emails', '{"user_id": 42}');
--   SELECT skiplock.enqueue('emails', '{"user_id": 42}', kind => 'welcome', delay => interval '30 seconds');
--
-- Returns the new job's id. The insert fires the usual notification when the calling
-- transaction commits. Bad input raises an error with SQLSTATE 22023 (invalid_parameter_value)
-- and a message naming the argument; nothing is inserted.
CREATE FUNCTION {schema}.enqueue(
  queue        text,
  payload      jsonb,
  kind         text        DEFAULT 'default',
  priority     smallint    DEFAULT 0,
  max_attempts int         DEFAULT 5,
  delay        interval    DEFAULT NULL,
  run_at       timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  new_id bigint;
BEGIN
  IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid queue name %: use 1 to 128 letters, digits, "_", "." or "-"',
      coalesce(quote_literal(left(queue, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF kind IS NULL OR kind !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid job kind %: use 1 to 128 letters, digits, "_", ".", ":" or "-"',
      coalesce(quote_literal(left(kind, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF payload IS NULL THEN
    RAISE EXCEPTION 'invalid payload: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF octet_length(payload::text) > 1048576 THEN
    RAISE EXCEPTION 'invalid payload: it is % bytes; the limit is 1048576',
      octet_length(payload::text) USING ERRCODE = '22023';
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 10000 THEN
    RAISE EXCEPTION 'invalid max_attempts %: it must be 1 to 10000',
      coalesce(max_attempts::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  IF priority IS NULL THEN
    RAISE EXCEPTION 'invalid priority: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF delay IS NOT NULL AND run_at IS NOT NULL THEN
    RAISE EXCEPTION 'give delay or run_at, not both' USING ERRCODE = '22023';
  END IF;
  IF delay IS NOT NULL AND (delay < interval '0' OR delay > interval '100 years') THEN
    RAISE EXCEPTION 'invalid delay %: it must be 0 to 100 years', delay USING ERRCODE = '22023';
  END IF;
  IF run_at IS NOT NULL AND NOT isfinite(run_at) THEN
    RAISE EXCEPTION 'invalid run_at %: it must be a finite time', run_at USING ERRCODE = '22023';
  END IF;
  INSERT INTO {schema}.jobs AS j (queue, kind, payload, priority, max_attempts, run_at)
  VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.priority, enqueue.max_attempts,
          coalesce(enqueue.run_at, now() + coalesce(enqueue.delay, interval '0')))
  RETURNING j.id INTO new_id;
  RETURN new_id;
END;
$$;
