-- Site analytics read paths: per-site rollups kept exact by a statement trigger on events, plus
-- indexes for the queries rollups cannot answer (filters, the event log, the export).
--
-- Rollups exist at two grains: 'h' (UTC hour) serves the 24h and 7d windows, 'd' (UTC day) serves
-- 30d and 90d, so an overview reads a few thousand rollup rows instead of up to a million events.

-- Keys of the top lists, shared by the trigger and the raw-event queries so both agree.
-- Page: the path without query string or fragment.
CREATE FUNCTION tally_page_key(path text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(split_part(split_part(path, '#', 1), '?', 1), '')
$$;

-- Referrer: the lower-cased host without "www."; NULL when empty or when it is the site itself or
-- one of its subdomains (internal navigation is not a referral). String functions, no regex: callers
-- group by the raw referrer first, so this runs once per distinct referrer, not once per event.
CREATE FUNCTION tally_referrer_key(referrer text, domain text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    h text := lower(referrer);
    d text := lower(coalesce(domain, ''));
BEGIN
    IF h IS NULL OR h = '' THEN
        RETURN NULL;
    END IF;
    IF strpos(h, '://') > 0 THEN
        h := substr(h, strpos(h, '://') + 3);
    END IF;
    h := split_part(split_part(split_part(split_part(split_part(h, '/', 1), '?', 1), '#', 1), '@', -1), ':', 1);
    IF left(h, 4) = 'www.' THEN
        h := substr(h, 5);
    END IF;
    IF h = '' OR (d <> '' AND (h = d OR right(h, length(d) + 1) = '.' || d)) THEN
        RETURN NULL;
    END IF;
    RETURN h;
END
$$;

CREATE TABLE site_rollup_counts (
    site_id text NOT NULL,
    grain   "char" NOT NULL,          -- 'h' hour, 'd' day
    bucket  timestamptz NOT NULL,     -- UTC start of the hour or day
    name    text NOT NULL,
    events  bigint NOT NULL,
    PRIMARY KEY (site_id, grain, name, bucket)
);

CREATE TABLE site_rollup_dims (
    site_id text NOT NULL,
    grain   "char" NOT NULL,
    dim     "char" NOT NULL,          -- 'p' page, 'r' referrer host, 'c' country
    name    text NOT NULL,
    bucket  timestamptz NOT NULL,
    key     text NOT NULL,
    events  bigint NOT NULL,
    PRIMARY KEY (site_id, grain, dim, name, bucket, key)
);

-- Last activity of each visitor hash, to the minute. Every range ends now and starts on a minute
-- boundary, so the distinct visitors of a window are exactly the visitors last seen at or after its
-- start: an index range count, for any range. Minute precision also means a visitor's row is
-- rewritten at most once a minute, not on every event.
CREATE TABLE site_visitors (
    site_id   text NOT NULL,
    visitor   text NOT NULL,
    last_seen timestamptz NOT NULL,
    PRIMARY KEY (site_id, visitor)
);
CREATE INDEX site_visitors_last_seen ON site_visitors (site_id, last_seen);

-- Sessions by the hour/day they started: count, single-pageview sessions, summed duration (µs).
CREATE TABLE site_session_rollups (
    site_id     text NOT NULL,
    grain       "char" NOT NULL,
    bucket      timestamptz NOT NULL,
    sessions    bigint NOT NULL,
    bounces     bigint NOT NULL,
    duration_us bigint NOT NULL,
    PRIMARY KEY (site_id, grain, bucket)
);

-- Folds the rows of one INSERT/COPY into the rollups, in the writer's transaction, so rollups are
-- exact and never lag. Keyed events (site_id NULL) leave after one probe of the transition table.
-- Rows are upserted in key order so concurrent flushes of the same site lock in the same order.
CREATE FUNCTION tally_site_rollup() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_events WHERE site_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;

    INSERT INTO site_rollup_counts AS r (site_id, grain, name, bucket, events)
    SELECT n.site_id, g.grain, n.name, date_trunc(g.unit, n.ts, 'UTC'), count(*)
    FROM new_events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
    WHERE n.site_id IS NOT NULL
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (site_id, grain, name, bucket) DO UPDATE SET events = r.events + EXCLUDED.events;

    INSERT INTO site_rollup_dims AS r (site_id, grain, dim, name, bucket, key, events)
    SELECT site_id, grain, dim, name, bucket, key, sum(c) FROM (
        SELECT x.site_id, x.grain, 'p'::"char" AS dim, x.name, x.bucket, tally_page_key(x.path) AS key, x.c
        FROM (SELECT n.site_id, g.grain, n.name, date_trunc(g.unit, n.ts, 'UTC') AS bucket, n.path, count(*) AS c
              FROM new_events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
              WHERE n.site_id IS NOT NULL GROUP BY 1, 2, 3, 4, 5) x
        UNION ALL
        SELECT x.site_id, x.grain, 'r'::"char", x.name, x.bucket, tally_referrer_key(x.referrer, s.domain), x.c
        FROM (SELECT n.site_id, g.grain, n.name, date_trunc(g.unit, n.ts, 'UTC') AS bucket, n.referrer, count(*) AS c
              FROM new_events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
              WHERE n.site_id IS NOT NULL AND n.referrer <> '' GROUP BY 1, 2, 3, 4, 5) x
        LEFT JOIN sites s ON s.id = x.site_id
        UNION ALL
        SELECT n.site_id, g.grain, 'c'::"char", n.name, date_trunc(g.unit, n.ts, 'UTC'), n.country, count(*)
        FROM new_events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
        WHERE n.site_id IS NOT NULL AND n.country <> '' GROUP BY 1, 2, 3, 4, 5, 6
    ) k
    WHERE key IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (site_id, grain, dim, name, bucket, key) DO UPDATE SET events = r.events + EXCLUDED.events;

    INSERT INTO site_visitors AS v (site_id, visitor, last_seen)
    SELECT n.site_id, n.ip_hash, date_trunc('minute', max(n.ts), 'UTC') FROM new_events n
    WHERE n.site_id IS NOT NULL AND n.ip_hash IS NOT NULL
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (site_id, visitor) DO UPDATE SET last_seen = EXCLUDED.last_seen
    WHERE EXCLUDED.last_seen > v.last_seen;

    RETURN NULL;
END
$$;

CREATE TRIGGER events_site_rollup AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION tally_site_rollup();

-- Site events already stored when this migration runs.
INSERT INTO site_rollup_counts (site_id, grain, name, bucket, events)
SELECT n.site_id, g.grain, n.name, date_trunc(g.unit, n.ts, 'UTC'), count(*)
FROM events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
WHERE n.site_id IS NOT NULL GROUP BY 1, 2, 3, 4;

INSERT INTO site_rollup_dims AS r (site_id, grain, dim, name, bucket, key, events)
SELECT site_id, grain, dim, name, bucket, key, sum(c) FROM (
    SELECT x.site_id, x.grain, 'p'::"char" AS dim, x.name, x.bucket, tally_page_key(x.path) AS key, x.c
    FROM (SELECT n.site_id, g.grain, n.name, date_trunc(g.unit, n.ts, 'UTC') AS bucket, n.path, count(*) AS c
          FROM events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
          WHERE n.site_id IS NOT NULL GROUP BY 1, 2, 3, 4, 5) x
    UNION ALL
    SELECT x.site_id, x.grain, 'r'::"char", x.name, x.bucket, tally_referrer_key(x.referrer, s.domain), x.c
    FROM (SELECT n.site_id, g.grain, n.name, date_trunc(g.unit, n.ts, 'UTC') AS bucket, n.referrer, count(*) AS c
          FROM events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
          WHERE n.site_id IS NOT NULL AND n.referrer <> '' GROUP BY 1, 2, 3, 4, 5) x
    LEFT JOIN sites s ON s.id = x.site_id
    UNION ALL
    SELECT n.site_id, g.grain, 'c'::"char", n.name, date_trunc(g.unit, n.ts, 'UTC'), n.country, count(*)
    FROM events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
    WHERE n.site_id IS NOT NULL AND n.country <> '' GROUP BY 1, 2, 3, 4, 5, 6
) k
WHERE key IS NOT NULL
GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
ON CONFLICT (site_id, grain, dim, name, bucket, key) DO UPDATE SET events = r.events + EXCLUDED.events;

INSERT INTO site_visitors (site_id, visitor, last_seen)
SELECT site_id, ip_hash, date_trunc('minute', max(ts), 'UTC') FROM events WHERE site_id IS NOT NULL AND ip_hash IS NOT NULL GROUP BY 1, 2;

-- Session rollups follow every insert, update and delete of sessions (the site actor upserts them,
-- so a session's pageviews and end move while it lasts): add the new rows' contribution and
-- subtract the old rows'.
CREATE FUNCTION tally_session_rollup() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO site_session_rollups AS r (site_id, grain, bucket, sessions, bounces, duration_us)
        SELECT s.site_id, g.grain, date_trunc(g.unit, s.started_at, 'UTC'), count(*),
               count(*) FILTER (WHERE s.pageviews = 1),
               sum((extract(epoch FROM s.ended_at - s.started_at) * 1000000)::bigint)
        FROM new_sessions s CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (site_id, grain, bucket) DO UPDATE SET sessions = r.sessions + EXCLUDED.sessions,
            bounces = r.bounces + EXCLUDED.bounces, duration_us = r.duration_us + EXCLUDED.duration_us;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO site_session_rollups AS r (site_id, grain, bucket, sessions, bounces, duration_us)
        SELECT x.site_id, g.grain, date_trunc(g.unit, x.started_at, 'UTC'), sum(x.n), sum(x.b), sum(x.d)
        FROM (SELECT site_id, started_at, 1 AS n, (pageviews = 1)::int AS b,
                     (extract(epoch FROM ended_at - started_at) * 1000000)::bigint AS d FROM new_sessions
              UNION ALL
              SELECT site_id, started_at, -1, -(pageviews = 1)::int,
                     -(extract(epoch FROM ended_at - started_at) * 1000000)::bigint FROM old_sessions) x
        CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (site_id, grain, bucket) DO UPDATE SET sessions = r.sessions + EXCLUDED.sessions,
            bounces = r.bounces + EXCLUDED.bounces, duration_us = r.duration_us + EXCLUDED.duration_us;
    ELSE
        INSERT INTO site_session_rollups AS r (site_id, grain, bucket, sessions, bounces, duration_us)
        SELECT s.site_id, g.grain, date_trunc(g.unit, s.started_at, 'UTC'), -count(*),
               -count(*) FILTER (WHERE s.pageviews = 1),
               -sum((extract(epoch FROM s.ended_at - s.started_at) * 1000000)::bigint)
        FROM old_sessions s CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (site_id, grain, bucket) DO UPDATE SET sessions = r.sessions + EXCLUDED.sessions,
            bounces = r.bounces + EXCLUDED.bounces, duration_us = r.duration_us + EXCLUDED.duration_us;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER sessions_rollup_insert AFTER INSERT ON sessions
    REFERENCING NEW TABLE AS new_sessions FOR EACH STATEMENT EXECUTE FUNCTION tally_session_rollup();
CREATE TRIGGER sessions_rollup_update AFTER UPDATE ON sessions
    REFERENCING OLD TABLE AS old_sessions NEW TABLE AS new_sessions
    FOR EACH STATEMENT EXECUTE FUNCTION tally_session_rollup();
CREATE TRIGGER sessions_rollup_delete AFTER DELETE ON sessions
    REFERENCING OLD TABLE AS old_sessions FOR EACH STATEMENT EXECUTE FUNCTION tally_session_rollup();

INSERT INTO site_session_rollups (site_id, grain, bucket, sessions, bounces, duration_us)
SELECT s.site_id, g.grain, date_trunc(g.unit, s.started_at, 'UTC'), count(*), count(*) FILTER (WHERE s.pageviews = 1),
       sum((extract(epoch FROM s.ended_at - s.started_at) * 1000000)::bigint)
FROM sessions s CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
GROUP BY 1, 2, 3;

-- Filtered reads, custom-event charts over 1h and the event log of one name.
CREATE INDEX events_site_name_ts ON events (site_id, name, ts) WHERE site_id IS NOT NULL;
