-- alias (0015, 0024) moved the previous id's events to the new id in PostgreSQL only: the analytics store
-- kept the copies it had mirrored under the previous actor, so funnels and retention split one person in
-- two, and erasing the new id left those copies behind. Now the moved events are listed in the outbox again
-- (the mirror writes their current copy) and in analytics_aliases, whose rows tell the mirror to delete the
-- copies of those events that no longer match PostgreSQL, in the transaction of the alias.
CREATE TABLE analytics_aliases (
    seq          bigserial PRIMARY KEY,
    workspace_id bigint NOT NULL,
    env          text NOT NULL,
    stamps       timestamptz[] NOT NULL,
    ids          text[] NOT NULL
);

CREATE OR REPLACE FUNCTION tally_segment_alias(ws bigint, environment text, previous text, target text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    old_traits jsonb;
    old_created timestamptz;
    moved_count bigint;
    last_ts timestamptz;
    first_ts timestamptz;
    moved_stamps timestamptz[];
    moved_ids text[];
BEGIN
    IF previous = target THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared((ws % 2147483647)::integer, CASE WHEN environment = 'test' THEN 1 ELSE 0 END);
    -- Two updates (disjoint: user_id set or NULL), each on its own index, as before.
    WITH by_user AS (
        UPDATE events SET user_id = target
        WHERE workspace_id = ws AND env = environment AND user_id = previous AND site_id IS NULL
        RETURNING ts, id
    ), by_anonymous AS (
        UPDATE events SET user_id = target
        WHERE workspace_id = ws AND env = environment AND user_id IS NULL AND anonymous_id = previous
          AND site_id IS NULL
        RETURNING ts, id
    ), moved AS (SELECT * FROM by_user UNION ALL SELECT * FROM by_anonymous)
    SELECT array_agg(ts), array_agg(id), count(*) INTO moved_stamps, moved_ids, moved_count FROM moved;
    IF moved_count > 0 THEN
        INSERT INTO analytics_outbox (workspace_id, env, stamps, ids, events)
        VALUES (ws, environment, moved_stamps, moved_ids, moved_count);
        INSERT INTO analytics_aliases (workspace_id, env, stamps, ids)
        VALUES (ws, environment, moved_stamps, moved_ids);
    END IF;
    DELETE FROM user_profiles WHERE workspace_id = ws AND env = environment AND user_id = previous
    RETURNING traits, created_at INTO old_traits, old_created;
    SELECT count(*), max(ts), min(ts) INTO moved_count, last_ts, first_ts
    FROM events WHERE workspace_id = ws AND env = environment AND user_id = target AND site_id IS NULL;
    IF old_traits IS NULL AND moved_count = 0 THEN
        RETURN;
    END IF;
    INSERT INTO user_profiles AS u (workspace_id, env, user_id, traits, created_at, last_seen_at, event_count)
    VALUES (ws, environment, target, COALESCE(old_traits, '{}'::jsonb),
            COALESCE(LEAST(old_created, first_ts), now()), last_ts, moved_count)
    ON CONFLICT (workspace_id, env, user_id) DO UPDATE
    SET traits = EXCLUDED.traits || u.traits,
        created_at = LEAST(u.created_at, EXCLUDED.created_at),
        last_seen_at = EXCLUDED.last_seen_at,
        event_count = EXCLUDED.event_count;
END
$$;
