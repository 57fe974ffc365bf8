-- Custom SQL must not take advisory locks. The service's own locks are advisory: the erasure lock every
-- keyed flush takes shared (per workspace and env), the partition lock, the analytics mirror's lock, the
-- scheduler's job locks and the migration lock. A report holding one of them for its statement timeout
-- stopped another workspace's ingestion, or every tenant's analytics reads (found by a walk-through).
--
-- As in 0011: the functions are granted to PUBLIC and PostgreSQL has no per-role deny, so in Tally's own
-- database they are revoked from PUBLIC and granted back to the service's own role (superusers need no
-- grant). A non-superuser service role cannot change catalog privileges: the migration then only warns
-- (docs/decisions.md gives the statements for an administrator to run).
DO $$
DECLARE
    obj record;
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RAISE WARNING 'custom SQL can still take advisory locks: migration 0025 needs a superuser';
        RETURN;
    END IF;
    FOR obj IN
        SELECT p.oid::regprocedure AS fn FROM pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND (p.proname LIKE 'pg\_advisory\_%' OR p.proname LIKE 'pg\_try\_advisory\_%')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', obj.fn);
        IF current_user <> 'postgres' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', obj.fn, current_user);
        END IF;
    END LOOP;
END
$$;
