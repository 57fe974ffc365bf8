-- Custom SQL must not read PostgreSQL's statistics: pg_stat_* / pg_statio_* views, pg_stats (most
-- common values of granted columns such as events.user_id), pg_class's row and page estimates, the
-- pg_stat_get_* functions and relation sizes reveal other tenants' rows and volumes.
--
-- PostgreSQL has no per-role deny, and these objects are granted to PUBLIC, so in Tally's own
-- database they are revoked from PUBLIC and granted back to pg_read_all_stats (which pg_monitor
-- includes: monitoring agents keep working) and to the service's own role. Superusers are unaffected.
-- Catalog privileges are per database: other databases on the server keep PostgreSQL's defaults.
-- Changing catalog privileges needs a superuser; run as a non-superuser service role, the migration
-- only warns (docs/decisions.md gives the statements for an administrator to run).
-- Object lists are read from the catalog, so the same text fits PostgreSQL 15 and 18.
DO $$
DECLARE
    obj record;
    keep text[] := ARRAY['pg_read_all_stats'];
    cols text;
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RAISE WARNING 'statistics views stay readable by custom SQL: migration 0011 needs a superuser';
        RETURN;
    END IF;
    -- A superuser service role needs no grant; a role other than the bootstrap one is kept explicitly
    -- in case the service later runs as it without superuser.
    IF current_user <> 'postgres' THEN
        keep := keep || current_user::text;
    END IF;

    FOR obj IN
        SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind IN ('v', 'r', 'm')
          AND (c.relname LIKE 'pg\_stat\_%' OR c.relname LIKE 'pg\_statio\_%'
               OR c.relname IN ('pg_stats', 'pg_stats_ext', 'pg_stats_ext_exprs', 'pg_statistic_ext'))
    LOOP
        EXECUTE format('REVOKE ALL ON pg_catalog.%I FROM PUBLIC', obj.relname);
        EXECUTE format('GRANT SELECT ON pg_catalog.%I TO %s', obj.relname,
                       (SELECT string_agg(quote_ident(k), ', ') FROM unnest(keep) k));
    END LOOP;

    -- pg_class stays readable, but not its estimates (reltuples, relpages, relallvisible, relallfrozen).
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute
    WHERE attrelid = 'pg_catalog.pg_class'::regclass AND attnum > 0 AND NOT attisdropped
      AND attname NOT IN ('reltuples', 'relpages', 'relallvisible', 'relallfrozen');
    REVOKE SELECT ON pg_catalog.pg_class FROM PUBLIC;
    EXECUTE format('GRANT SELECT (%s) ON pg_catalog.pg_class TO PUBLIC', cols);
    EXECUTE format('GRANT SELECT ON pg_catalog.pg_class TO %s',
                   (SELECT string_agg(quote_ident(k), ', ') FROM unnest(keep) k));

    FOR obj IN
        SELECT p.oid::regprocedure AS fn FROM pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND (p.proname LIKE 'pg\_stat\_get\_%' OR p.proname LIKE 'pg\_stat\_%'
               OR p.proname IN ('pg_relation_size', 'pg_total_relation_size', 'pg_table_size',
                                'pg_indexes_size', 'pg_database_size', 'pg_tablespace_size',
                                'pg_relation_filenode', 'pg_relation_filepath'))
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', obj.fn);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', obj.fn,
                       (SELECT string_agg(quote_ident(k), ', ') FROM unnest(keep) k));
    END LOOP;
END
$$;
