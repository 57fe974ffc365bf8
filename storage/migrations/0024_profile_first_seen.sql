-- A profile's created_at is the earliest time its user was seen: the earliest identify or event timestamp.
-- alias (0015) started the profile it builds from moved events at their earliest *receive* time, so the
-- profile made by aliasing an anonymous id could begin after its last event. Same function otherwise.
CREATE OR REPLACE FUNCTION tally_segment_alias(ws bigint, environment text, previous text, target text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    old_traits jsonb;
    old_created timestamptz;
    moved_count bigint;
    last_ts timestamptz;
    first_ts timestamptz;
BEGIN
    IF previous = target THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared((ws % 2147483647)::integer, CASE WHEN environment = 'test' THEN 1 ELSE 0 END);
    UPDATE events SET user_id = target
    WHERE workspace_id = ws AND env = environment AND user_id = previous AND site_id IS NULL;
    UPDATE events SET user_id = target
    WHERE workspace_id = ws AND env = environment AND user_id IS NULL AND anonymous_id = previous
      AND site_id IS NULL;
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

-- Profiles that function left beginning after their last event start at their first event instead
-- (through events_ws_user, for these rows only). Other early times it or a back-dated identify missed
-- cannot be told from the rows.
UPDATE user_profiles p
SET created_at = (SELECT min(e.ts) FROM events e
                  WHERE e.workspace_id = p.workspace_id AND e.env = p.env AND e.user_id = p.user_id
                    AND e.site_id IS NULL)
WHERE p.created_at > p.last_seen_at;
