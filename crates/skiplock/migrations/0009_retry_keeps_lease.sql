-- skiplock migration 9: a unique enqueue that replaces run_at never makes a job ready while
-- a cancelled earlier attempt's lease may still run.
--
-- job_cancel.sql keeps a cancelled running job's locked_until, and job_retry.sql keeps it on
-- the retried (queued) job while it is in the future. enqueue_unique() with
-- on_conflict => 'replace' now sets run_at to no earlier than that lease's end, as
-- job_unique_replace.sql does for the library. The function is otherwise migration 6's.
CREATE OR REPLACE FUNCTION {schema}.enqueue_unique(
  queue                text,
  payload              jsonb,
  kind                 text        DEFAULT 'default',
  priority             smallint    DEFAULT 0,
  max_attempts         int         DEFAULT 5,
  delay                interval    DEFAULT NULL,
  run_at               timestamptz DEFAULT NULL,
  unique_key           text        DEFAULT NULL,
  unique_by_args       boolean     DEFAULT false,
  unique_fields        text[]      DEFAULT NULL,
  unique_by_queue      boolean     DEFAULT false,
  unique_period        interval    DEFAULT NULL,
  on_conflict          text        DEFAULT 'skip',
  queue_behind_running boolean     DEFAULT false,
  OUT id               bigint,
  OUT inserted         boolean
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  rule      text;
  period_us bigint := 0;
  k         text;
  when_due  timestamptz;
  found_id  bigint;
  found_q   text;
BEGIN
  IF enqueue_unique.queue IS NULL OR enqueue_unique.queue !~ '^[A-Za-z0-9_.-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid queue name %: use 1 to 128 letters, digits, "_", "." or "-"',
      coalesce(quote_literal(left(enqueue_unique.queue, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.kind IS NULL OR enqueue_unique.kind !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
    RAISE EXCEPTION 'invalid job kind %: use 1 to 128 letters, digits, "_", ".", ":" or "-"',
      coalesce(quote_literal(left(enqueue_unique.kind, 140)), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.payload IS NULL THEN
    RAISE EXCEPTION 'invalid payload: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF octet_length(enqueue_unique.payload::text) > 1048576 THEN
    RAISE EXCEPTION 'invalid payload: it is % bytes; the limit is 1048576',
      octet_length(enqueue_unique.payload::text) USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.max_attempts IS NULL OR enqueue_unique.max_attempts < 1
     OR enqueue_unique.max_attempts > 10000 THEN
    RAISE EXCEPTION 'invalid max_attempts %: it must be 1 to 10000',
      coalesce(enqueue_unique.max_attempts::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.priority IS NULL THEN
    RAISE EXCEPTION 'invalid priority: it is NULL' USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.delay IS NOT NULL AND enqueue_unique.run_at IS NOT NULL THEN
    RAISE EXCEPTION 'give delay or run_at, not both' USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.delay IS NOT NULL
     AND (enqueue_unique.delay < interval '0' OR enqueue_unique.delay > interval '100 years') THEN
    RAISE EXCEPTION 'invalid delay %: it must be 0 to 100 years', enqueue_unique.delay
      USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.run_at IS NOT NULL AND NOT isfinite(enqueue_unique.run_at) THEN
    RAISE EXCEPTION 'invalid run_at %: it must be a finite time', enqueue_unique.run_at
      USING ERRCODE = '22023';
  END IF;
  IF (enqueue_unique.unique_key IS NOT NULL)::int + coalesce(enqueue_unique.unique_by_args, false)::int
     + (enqueue_unique.unique_fields IS NOT NULL)::int <> 1 THEN
    RAISE EXCEPTION 'give exactly one of unique_key, unique_by_args, unique_fields'
      USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.unique_key IS NOT NULL
     AND (octet_length(enqueue_unique.unique_key) NOT BETWEEN 1 AND 1024) THEN
    RAISE EXCEPTION 'invalid unique_key: it must be 1 to 1024 bytes' USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.unique_fields IS NOT NULL
     AND (cardinality(enqueue_unique.unique_fields) NOT BETWEEN 1 AND 64
          OR array_position(enqueue_unique.unique_fields, NULL) IS NOT NULL) THEN
    RAISE EXCEPTION 'invalid unique_fields: give 1 to 64 field names, none NULL'
      USING ERRCODE = '22023';
  END IF;
  IF enqueue_unique.unique_period IS NOT NULL THEN
    IF enqueue_unique.unique_period < interval '1 second'
       OR enqueue_unique.unique_period > interval '100 years' THEN
      RAISE EXCEPTION 'invalid unique_period %: it must be 1 second to 100 years',
        enqueue_unique.unique_period USING ERRCODE = '22023';
    END IF;
    period_us := (extract(epoch FROM enqueue_unique.unique_period) * 1000000)::bigint;
  END IF;
  IF enqueue_unique.on_conflict IS NULL
     OR enqueue_unique.on_conflict NOT IN ('skip', 'replace', 'keep_run_at') THEN
    RAISE EXCEPTION 'invalid on_conflict %: use skip, replace or keep_run_at',
      coalesce(quote_literal(left(enqueue_unique.on_conflict, 40)), 'NULL') USING ERRCODE = '22023';
  END IF;
  rule := CASE WHEN enqueue_unique.unique_key IS NOT NULL THEN 'key'
               WHEN enqueue_unique.unique_by_args THEN 'args'
               ELSE 'fields' END;
  k := {schema}.unique_key(rule, enqueue_unique.kind,
         CASE WHEN enqueue_unique.unique_by_queue THEN enqueue_unique.queue END,
         enqueue_unique.payload, enqueue_unique.unique_fields, enqueue_unique.unique_key,
         period_us);
  when_due := coalesce(enqueue_unique.run_at, now() + coalesce(enqueue_unique.delay, interval '0'));
  -- Insert, or learn the active duplicate. Each statement sees what committed before it
  -- began (READ COMMITTED), so a duplicate that finished in between is tried again.
  FOR round IN 1..10 LOOP
    INSERT INTO {schema}.jobs AS j
      (queue, kind, payload, priority, max_attempts, run_at, unique_key, unique_queued_only)
    VALUES (enqueue_unique.queue, enqueue_unique.kind, enqueue_unique.payload,
            enqueue_unique.priority, enqueue_unique.max_attempts, when_due, k,
            coalesce(enqueue_unique.queue_behind_running, false))
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
    DO NOTHING
    RETURNING j.id INTO found_id;
    IF found_id IS NOT NULL THEN
      id := found_id;
      inserted := true;
      RETURN;
    END IF;
    IF enqueue_unique.on_conflict <> 'skip' THEN
      UPDATE {schema}.jobs AS j
      SET payload = enqueue_unique.payload,
          run_at  = CASE WHEN enqueue_unique.on_conflict = 'replace'
                         THEN greatest(when_due, j.locked_until) ELSE j.run_at END
      WHERE j.unique_key = k AND j.status = 'queued'
      RETURNING j.id, j.queue INTO found_id, found_q;
      IF found_id IS NOT NULL THEN
        -- Its run_at may have moved earlier: wake that queue's workers (at commit).
        PERFORM pg_notify({channel}, found_q);
        id := found_id;
        inserted := false;
        RETURN;
      END IF;
    END IF;
    SELECT j.id INTO found_id FROM {schema}.jobs AS j
    WHERE j.unique_key = k AND j.status IN ('queued', 'running');
    IF found_id IS NOT NULL THEN
      id := found_id;
      inserted := false;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'the active duplicate of unique key % kept finishing; try again', k
    USING ERRCODE = '40001';
END;
$$;
