-- A Segment alias moves events to another user with an UPDATE, which the outbox trigger (AFTER INSERT) never
-- saw: the analytics store kept them under the previous actor, so reports did not merge the user, and an
-- erasure of the new user (which deletes its user_id there) left them in every report. The alias now lists
-- the moved events in the outbox, so the mirror writes their new version, and queues here the version to
-- delete (the events' ids and their former user_id, '' for anonymous events as the store has it), which
-- the mirror deletes once that outbox row is written (storage/analytics_moves.py).
CREATE TABLE analytics_moves (
    seq          bigserial PRIMARY KEY,
    workspace_id bigint NOT NULL,
    env          text NOT NULL,
    outbox_seq   bigint NOT NULL,
    old_user_id  text NOT NULL,
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
BEGIN
    IF previous = target THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared((ws % 2147483647)::integer, CASE WHEN environment = 'test' THEN 1 ELSE 0 END);
    WITH moved AS (
        UPDATE events SET user_id = target
        WHERE workspace_id = ws AND env = environment AND user_id = previous AND site_id IS NULL
        RETURNING ts, id
    ), listed AS (
        INSERT INTO analytics_outbox (workspace_id, env, stamps, ids, events)
        SELECT ws, environment, array_agg(ts), array_agg(id), count(*) FROM moved HAVING count(*) > 0
        RETURNING seq, ids
    )
    INSERT INTO analytics_moves (workspace_id, env, outbox_seq, old_user_id, ids)
    SELECT ws, environment, seq, previous, ids FROM listed;
    WITH moved AS (
        UPDATE events SET user_id = target
        WHERE workspace_id = ws AND env = environment AND user_id IS NULL AND anonymous_id = previous
          AND site_id IS NULL
        RETURNING ts, id
    ), listed AS (
        INSERT INTO analytics_outbox (workspace_id, env, stamps, ids, events)
        SELECT ws, environment, array_agg(ts), array_agg(id), count(*) FROM moved HAVING count(*) > 0
        RETURNING seq, ids
    )
    INSERT INTO analytics_moves (workspace_id, env, outbox_seq, old_user_id, ids)
    SELECT ws, environment, seq, '', ids FROM listed;
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
