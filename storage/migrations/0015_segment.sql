-- Segment sources: a write key (its SHA-256 only) finds the source of a Segment tracking call, and
-- messageIds already stored per source make SDK retries idempotent.
ALTER TABLE data_sources ADD COLUMN write_key_hash bytea;
CREATE UNIQUE INDEX data_sources_write_key ON data_sources (write_key_hash) WHERE write_key_hash IS NOT NULL;

-- One row per accepted messageId, inserted in the transaction that stores the message, so a retry racing
-- the first delivery waits on the key and then finds it. Rows older than the dedupe window are pruned by
-- a scheduled job; no foreign key, so a source's deletion does not scan this table.
CREATE TABLE segment_messages (
    source_id   text NOT NULL,
    message_id  text NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (source_id, message_id)
);
-- BRIN: rows arrive in received_at order, and the prune job is the only reader; a btree would cost every insert.
CREATE INDEX segment_messages_received ON segment_messages USING brin (received_at);

-- alias(previousId -> userId) also claims the anonymous events sent under previousId. Partial, so that only
-- keyed anonymous events pay for it.
CREATE INDEX events_ws_anonymous ON events (workspace_id, env, anonymous_id)
    WHERE user_id IS NULL AND anonymous_id IS NOT NULL AND site_id IS NULL;

-- alias(previousId -> target): the previous id's events (and its anonymous keyed events) move to the target,
-- its profile's traits merge under the target's own (the target's win), and the target's activity is
-- recounted from its events. Takes the shared erasure lock, as every keyed write does (migration 0009).
CREATE FUNCTION tally_segment_alias(ws bigint, environment text, previous text, target text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    old_traits jsonb;
    old_created timestamptz;
    moved_count bigint;
    last_ts timestamptz;
    first_received timestamptz;
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
    SELECT count(*), max(ts), min(received_at) INTO moved_count, last_ts, first_received
    FROM events WHERE workspace_id = ws AND env = environment AND user_id = target AND site_id IS NULL;
    IF old_traits IS NULL AND moved_count = 0 THEN
        RETURN;
    END IF;
    INSERT INTO user_profiles AS u (workspace_id, env, user_id, traits, created_at, last_seen_at, event_count)
    VALUES (ws, environment, target, COALESCE(old_traits, '{}'::jsonb),
            COALESCE(LEAST(old_created, first_received), now()), last_ts, moved_count)
    ON CONFLICT (workspace_id, env, user_id) DO UPDATE
    SET traits = EXCLUDED.traits || u.traits,
        created_at = LEAST(u.created_at, EXCLUDED.created_at),
        last_seen_at = EXCLUDED.last_seen_at,
        event_count = EXCLUDED.event_count;
END
$$;
