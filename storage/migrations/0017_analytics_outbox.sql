-- The analytics mirror's outbox: every committed event has a row here until the mirror has written it
-- to the analytics store (ClickHouse). The rows are written by a statement trigger in the writer's own
-- transaction, so an event is committed exactly when its outbox row is: whatever crashes, an event in
-- PostgreSQL is either already mirrored or still listed here. The mirror deletes the rows it wrote, so
-- batches that commit out of order cannot be skipped (as a "sequence > last seen" tailer would).
-- Rows point at the event by (workspace_id, env, ts, id), the leading columns of events_ws_ts.
CREATE TABLE analytics_outbox (
    seq          bigserial PRIMARY KEY,
    workspace_id bigint NOT NULL,
    env          text NOT NULL,
    ts           timestamptz NOT NULL,
    id           text NOT NULL,
    queued_at    timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION tally_analytics_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO analytics_outbox (workspace_id, env, ts, id)
    SELECT n.workspace_id, n.env, n.ts, n.id FROM new_events n;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_analytics_outbox AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION tally_analytics_outbox();

-- Erasures still to apply to the analytics store, written in the erasure's transaction.
CREATE TABLE analytics_erasures (
    seq          bigserial PRIMARY KEY,
    workspace_id bigint NOT NULL,
    env          text NOT NULL,
    user_id      text NOT NULL
);

-- Events already stored when this migration runs reach the store through the outbox too.
INSERT INTO analytics_outbox (workspace_id, env, ts, id) SELECT workspace_id, env, ts, id FROM events;
