-- Custom SQL must not change settings. `set_config('work_mem', '8GB', true)` ahead of a sort let one
-- report take 2.6 GB of the shared PostgreSQL server's memory within its 5 s (4 MB without it), and a few
-- runs at once can have the server killed for memory (found by a walk-through). The service sets what the
-- sandbox needs (scope, statement_timeout, search_path) before it switches to the report role, and the
-- SET command cannot be written in a single SELECT, so set_config() is the only way in.
--
-- As in 0011 and 0025: revoked from PUBLIC in Tally's own database, granted back to the service's own
-- role and to pg_read_all_data (so a dump by a read-all backup role, which calls set_config, still
-- works); superusers need no grant. Run as a non-superuser the migration only warns.
DO $$
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RAISE WARNING 'custom SQL can still change settings: migration 0027 needs a superuser';
        RETURN;
    END IF;
    REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) TO pg_read_all_data;
    IF current_user <> 'postgres' THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) TO %I', current_user);
    END IF;
END
$$;
