-- One round trip instead of two per flush: take the shared erasure lock, then read the tombstones of the
-- batch's users. A volatile PL/pgSQL function takes a fresh snapshot for each statement, so the query
-- sees every erasure that committed while the lock was awaited.
CREATE FUNCTION tally_lock_and_read_erasures(lock_a integer, lock_b integer, ws bigint, environment text,
                                             users text[])
RETURNS TABLE (user_id text, erased_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(lock_a, lock_b);
    IF cardinality(users) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT e.user_id, max(e.erased_at) FROM erasures e
        WHERE e.workspace_id = ws AND e.env = environment AND e.user_id = ANY(users)
        GROUP BY e.user_id;
END
$$;
