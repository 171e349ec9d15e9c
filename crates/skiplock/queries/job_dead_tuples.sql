-- The vacuum service's check (see worker/vacuum.rs): the jobs table's dead row versions as the
-- statistics system counts them, and whether this role may VACUUM the table. Read-only and
-- cheap (no table access), so a worker can ask every few seconds.
--
-- VACUUM by a role without the right does not fail: it skips the table with a WARNING that
-- only the server log sees. So the right is asked for here, as each server version defines
-- it: from PostgreSQL 17 the MAINTAIN privilege (owners and pg_maintain members have it);
-- before, the table's owner or the database's owner, or a role with their privileges
-- (superusers included). CASE evaluates the 'MAINTAIN' branch only on 17 and later, where the
-- privilege name exists. The vacuum count tells the caller whether the statistics it reads
-- after its VACUUM already include it (before PostgreSQL 15 they may lag by a moment).
SELECT pg_stat_get_dead_tuples(c.oid)::int8 AS dead_tuples,
       pg_stat_get_vacuum_count(c.oid)::int8 AS vacuums,
       CASE WHEN current_setting('server_version_num')::int >= 170000
            THEN has_table_privilege(c.oid, 'MAINTAIN')
            ELSE pg_has_role(c.relowner, 'USAGE')
              OR pg_has_role((SELECT d.datdba FROM pg_database d
                               WHERE d.datname = current_database()), 'USAGE')
       END AS may_vacuum
FROM pg_class c
WHERE c.oid = '{schema}.jobs'::regclass
