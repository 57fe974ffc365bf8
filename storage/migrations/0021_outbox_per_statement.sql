-- The analytics outbox lists a statement's events in one row per (workspace, env) instead of one row
-- per event: the keys of a COPY's events go into two parallel arrays. Under single-event load a row per
-- event (a heap tuple, a primary-key entry, a sequence value, and later its DELETE) was about a fifth of
-- PostgreSQL's CPU per keyed event (bench/pg_event_cost.py); a row per statement costs one tuple per
-- flush. Same guarantee as 0017: the row commits exactly when its events do, and the mirror deletes only
-- the rows it wrote. Rows queued before this migration become one-event rows.
ALTER TABLE analytics_outbox RENAME COLUMN ts TO stamps;
ALTER TABLE analytics_outbox RENAME COLUMN id TO ids;
ALTER TABLE analytics_outbox
    ALTER COLUMN stamps TYPE timestamptz[] USING ARRAY[stamps],
    ALTER COLUMN ids TYPE text[] USING ARRAY[ids],
    ADD COLUMN events integer NOT NULL DEFAULT 1;
-- How many events the row lists, kept beside the arrays so that a round's bound and the lag count read
-- no array: a flush of 5,000 events is a compressed array out of line, and detoasting every one listed
-- to count it made rounds after a batch load crawl.
ALTER TABLE analytics_outbox ALTER COLUMN events DROP DEFAULT;

-- array_agg of the two columns in one grouping reads the rows in one order: stamps[i] belongs to ids[i].
CREATE OR REPLACE FUNCTION tally_analytics_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO analytics_outbox (workspace_id, env, stamps, ids, events)
    SELECT n.workspace_id, n.env, array_agg(n.ts), array_agg(n.id), count(*) FROM new_events n GROUP BY 1, 2;
    RETURN NULL;
END
$$;
