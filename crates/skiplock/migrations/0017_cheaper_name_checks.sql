-- skiplock migration 17: the name checks re-written as a search for a character outside
-- the allowed set.
--
-- Like every migration, this one may run again on a schema that has it (the upgrade tests
-- re-apply every migration from an older one): each step is written to allow that.
--
-- Why: PostgreSQL checks every CHECK constraint of a table on every UPDATE of a row, not
-- only on the columns the UPDATE sets, so a job's claim and its completion each ran the
-- queue and kind checks again. Written as `ltrim(name, <allowed set>) = ''`, a check
-- compares each character of the name with the characters of the set one by one: about
-- 0.75 us for a five-letter name and 3.6 us for one of 28 letters on the machine of
-- docs/BENCHMARKS.md, a tenth of the server's time per job. `name !~ '[^<allowed set>]'`
-- (no character outside the set) accepts exactly the same names (the set is the same,
-- listed character by character, no range and no escape) in one pass over the name: 0.13
-- and 0.30 us. (The unanchored negated class is what is cheap: an anchored
-- `'^[<set>]{1,128}$'` costs 2.9 us, which is why migration 1 chose ltrim.) Measured in
-- pgbench on the worker's claim in turn and completion (docs/BENCHMARKS.md's ceiling, 2
-- clients, three rounds each, alternating): 47,996-52,898 jobs/s before, 50,453-57,537 after.
--
-- The test it::bad_input::name_checks_accept_exactly_the_documented_names inserts every
-- ASCII character and a few others into each checked column of each table and compares
-- what the table accepts with the documented rule and with the ltrim form.
--
-- The new constraints are added NOT VALID, as migration 11's were: adding a constraint
-- otherwise reads the whole table while every write waits, and every row already
-- satisfies the constraint it replaces, which accepts the same values. NOT VALID concerns
-- existing rows only: every row inserted or updated from now on is checked.
ALTER TABLE {schema}.jobs
  DROP CONSTRAINT IF EXISTS jobs_queue_check,
  DROP CONSTRAINT IF EXISTS jobs_kind_check,
  DROP CONSTRAINT IF EXISTS jobs_key_check,
  DROP CONSTRAINT IF EXISTS jobs_sequence_check,
  ADD CONSTRAINT jobs_queue_check CHECK (octet_length(queue) BETWEEN 1 AND 128 AND
    queue !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-]') NOT VALID,
  ADD CONSTRAINT jobs_kind_check CHECK (octet_length(kind) BETWEEN 1 AND 128 AND
    kind !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-]') NOT VALID,
  ADD CONSTRAINT jobs_key_check CHECK (key IS NULL OR (octet_length(key) BETWEEN 1 AND 128 AND
    key !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@/-]')) NOT VALID,
  ADD CONSTRAINT jobs_sequence_check CHECK (sequence IS NULL OR
    (octet_length(sequence) BETWEEN 1 AND 128 AND
     sequence !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@/-]')) NOT VALID;

-- The queues' and the schedules' rows are few, but written on the paths of limited claims
-- and of fires: the same form, so that every name is checked one way.
ALTER TABLE {schema}.queues
  DROP CONSTRAINT IF EXISTS queues_name_check,
  ADD CONSTRAINT queues_name_check CHECK (octet_length(name) BETWEEN 1 AND 128 AND
    name !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-]') NOT VALID;

ALTER TABLE {schema}.schedules
  DROP CONSTRAINT IF EXISTS schedules_name_check,
  DROP CONSTRAINT IF EXISTS schedules_queue_check,
  DROP CONSTRAINT IF EXISTS schedules_kind_check,
  ADD CONSTRAINT schedules_name_check CHECK (octet_length(name) BETWEEN 1 AND 128 AND
    name !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-]') NOT VALID,
  ADD CONSTRAINT schedules_queue_check CHECK (octet_length(queue) BETWEEN 1 AND 128 AND
    queue !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-]') NOT VALID,
  ADD CONSTRAINT schedules_kind_check CHECK (octet_length(kind) BETWEEN 1 AND 128 AND
    kind !~ '[^ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-]') NOT VALID;
