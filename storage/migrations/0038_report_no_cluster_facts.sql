-- Custom SQL must not read what the PostgreSQL server knows beyond Tally's two views:
-- * pg_locks (and pg_lock_status(), pg_blocking_pids()) lists every session's locks, among them the
--   erasure lock each keyed flush takes shared, keyed by workspace id: which workspaces are ingesting,
--   and how often, as the statistics hidden by 0011 told their volumes;
-- * pg_prepared_xacts, pg_replication_slots and the replication origins: other transactions and clients;
-- * pg_database, pg_tablespace (and their locations), pg_roles, pg_user, pg_group, pg_auth_members,
--   pg_db_role_setting, pg_shdescription, pg_shseclabel, pg_shdepend: the server's other databases,
--   roles and their attributes, per-role and per-database settings, comments on them;
-- * pg_settings and current_setting(): the server's configuration;
-- * inet_server_addr/port(), inet_client_addr/port(), pg_postmaster_start_time(), pg_conf_load_time():
--   the addresses of Tally's database server and of the service itself, and when they last restarted;
-- * pg_get_userbyid(): a role's name from its number.
-- A role's name can still be had from its number by a cast to regrole, whose output function PostgreSQL
-- calls without a privilege check; its attributes and settings cannot. version() stays: client tools
-- ask for it on connecting.
--
-- As in 0011, 0025 and 0027: these are granted to PUBLIC and PostgreSQL has no per-role deny, so in
-- Tally's own database they are revoked from PUBLIC and granted back to the service's own role, to
-- pg_read_all_data (a read-all backup role's pg_dump reads the roles, databases and settings) and to
-- pg_monitor (monitoring agents read the databases, settings and locks); superusers need no grant.
-- The scope functions the reader's row-level security calls read current_setting() as their owner
-- (SECURITY DEFINER), not as the reader. Run as a non-superuser the migration only warns.
DO $$
DECLARE
    keep text;
    name text;
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RAISE WARNING 'custom SQL can still read the server''s databases, roles, settings and locks: '
                      'migration 0038 needs a superuser';
        RETURN;
    END IF;
    keep := 'pg_read_all_data, pg_monitor';
    IF current_user <> 'postgres' THEN
        keep := keep || ', ' || quote_ident(current_user);
    END IF;
    FOREACH name IN ARRAY ARRAY[
        'pg_locks', 'pg_prepared_xacts', 'pg_replication_slots', 'pg_replication_origin',
        'pg_replication_origin_status', 'pg_database', 'pg_tablespace', 'pg_roles', 'pg_user', 'pg_group',
        'pg_auth_members', 'pg_db_role_setting', 'pg_shdescription', 'pg_shseclabel', 'pg_shdepend',
        'pg_settings']
    LOOP
        IF to_regclass('pg_catalog.' || name) IS NOT NULL THEN
            EXECUTE format('REVOKE ALL ON pg_catalog.%I FROM PUBLIC', name);
            EXECUTE format('GRANT SELECT ON pg_catalog.%I TO %s', name, keep);
        END IF;
    END LOOP;
    FOREACH name IN ARRAY ARRAY[
        'pg_lock_status()', 'pg_blocking_pids(integer)', 'pg_safe_snapshot_blocking_pids(integer)',
        'pg_prepared_xact()', 'pg_get_replication_slots()', 'pg_show_replication_origin_status()',
        'pg_tablespace_location(oid)', 'pg_tablespace_databases(oid)', 'pg_show_all_settings()',
        'current_setting(text)', 'current_setting(text, boolean)', 'inet_server_addr()', 'inet_server_port()',
        'inet_client_addr()', 'inet_client_port()', 'pg_postmaster_start_time()', 'pg_conf_load_time()',
        'pg_get_userbyid(oid)']
    LOOP
        IF to_regprocedure('pg_catalog.' || name) IS NOT NULL THEN
            EXECUTE format('REVOKE EXECUTE ON FUNCTION pg_catalog.%s FROM PUBLIC', name);
            EXECUTE format('GRANT EXECUTE ON FUNCTION pg_catalog.%s TO %s', name, keep);
        END IF;
    END LOOP;
END
$$;
