-- Site sessions kept by an events trigger, like the rollups: a site batch becomes one COPY in its own
-- implicit transaction (two round trips) instead of BEGIN, COPY, session upsert and COMMIT.
--
-- What one statement adds to each session it touches, in event-time order (ties by id, which is the order
-- a process received them): first and last time, pageviews, events, first and last pageview path, first
-- non-empty referrer, first known country. Merged into an existing row so that batches may commit in any
-- order (an earlier start brings its entry path, a later end its exit path). Rows are upserted in key order
-- so that concurrent flushes lock them in one order. The sessions rollup triggers fire from here.
CREATE FUNCTION tally_site_sessions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Keyed batches leave here: an INSERT of no rows would still fire the sessions statement triggers.
    IF NOT EXISTS (SELECT 1 FROM new_events WHERE site_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO sessions AS s (site_id, id, started_at, ended_at, pageviews, events, entry_path, exit_path,
                               referrer, country)
    SELECT n.site_id, n.session_id, min(n.ts), max(n.ts),
           count(*) FILTER (WHERE n.name = 'pageview'), count(*),
           (array_agg(n.path ORDER BY n.ts, n.id) FILTER (WHERE n.name = 'pageview' AND n.path <> ''))[1],
           (array_agg(n.path ORDER BY n.ts DESC, n.id DESC) FILTER (WHERE n.name = 'pageview' AND n.path <> ''))[1],
           (array_agg(n.referrer ORDER BY n.ts, n.id) FILTER (WHERE n.referrer <> ''))[1],
           (array_agg(n.country ORDER BY n.ts, n.id) FILTER (WHERE n.country IS NOT NULL))[1]
    FROM new_events n
    WHERE n.site_id IS NOT NULL AND n.session_id IS NOT NULL
    GROUP BY n.site_id, n.session_id
    ORDER BY n.site_id, n.session_id
    ON CONFLICT (site_id, id) DO UPDATE SET
        started_at = LEAST(s.started_at, EXCLUDED.started_at),
        ended_at = GREATEST(s.ended_at, EXCLUDED.ended_at),
        pageviews = s.pageviews + EXCLUDED.pageviews,
        events = s.events + EXCLUDED.events,
        entry_path = CASE WHEN EXCLUDED.started_at < s.started_at AND EXCLUDED.entry_path IS NOT NULL
                          THEN EXCLUDED.entry_path ELSE COALESCE(s.entry_path, EXCLUDED.entry_path) END,
        exit_path = CASE WHEN EXCLUDED.ended_at >= s.ended_at AND EXCLUDED.exit_path IS NOT NULL
                         THEN EXCLUDED.exit_path ELSE COALESCE(s.exit_path, EXCLUDED.exit_path) END,
        referrer = CASE WHEN EXCLUDED.started_at < s.started_at AND EXCLUDED.referrer IS NOT NULL
                        THEN EXCLUDED.referrer ELSE COALESCE(s.referrer, EXCLUDED.referrer) END,
        country = CASE WHEN EXCLUDED.started_at < s.started_at AND EXCLUDED.country IS NOT NULL
                       THEN EXCLUDED.country ELSE COALESCE(s.country, EXCLUDED.country) END;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_site_sessions AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION tally_site_sessions();
