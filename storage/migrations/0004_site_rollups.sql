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
-- one of its subdomains (internal navigation is not a referral).
CREATE FUNCTION tally_referrer_key(referrer text, domain text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN h.host IS NULL OR h.host = '' THEN NULL
        WHEN domain IS NOT NULL AND (h.host = lower(domain) OR h.host LIKE '%.' || lower(domain)) THEN NULL
        ELSE h.host
    END
    FROM (SELECT coalesce(
        substring(lower(referrer) FROM '^[a-z][a-z0-9+.-]*://(?:www\.)?([^/?#:@]+)'),
        nullif(lower(referrer), '')) AS host) h
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

-- One row per visitor hash seen in a bucket: distinct visitors over a window are the distinct
-- visitors of these rows (uniques cannot be summed, so counts would not do).
CREATE TABLE site_rollup_visitors (
    site_id text NOT NULL,
    grain   "char" NOT NULL,
    bucket  timestamptz NOT NULL,
    visitor text NOT NULL,
    PRIMARY KEY (site_id, grain, bucket, visitor)
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
    SELECT n.site_id, g.grain, d.dim, n.name, date_trunc(g.unit, n.ts, 'UTC'), d.key, count(*)
    FROM new_events n
    LEFT JOIN sites s ON s.id = n.site_id
    CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
    CROSS JOIN LATERAL (VALUES ('p'::"char", tally_page_key(n.path)),
                               ('r'::"char", tally_referrer_key(n.referrer, s.domain)),
                               ('c'::"char", nullif(n.country, ''))) d (dim, key)
    WHERE n.site_id IS NOT NULL AND d.key IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (site_id, grain, dim, name, bucket, key) DO UPDATE SET events = r.events + EXCLUDED.events;

    INSERT INTO site_rollup_visitors (site_id, grain, bucket, visitor)
    SELECT DISTINCT n.site_id, g.grain, date_trunc(g.unit, n.ts, 'UTC'), n.ip_hash
    FROM new_events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
    WHERE n.site_id IS NOT NULL AND n.ip_hash IS NOT NULL
    ORDER BY 1, 2, 3, 4
    ON CONFLICT DO NOTHING;

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

INSERT INTO site_rollup_dims (site_id, grain, dim, name, bucket, key, events)
SELECT n.site_id, g.grain, d.dim, n.name, date_trunc(g.unit, n.ts, 'UTC'), d.key, count(*)
FROM events n
LEFT JOIN sites s ON s.id = n.site_id
CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
CROSS JOIN LATERAL (VALUES ('p'::"char", tally_page_key(n.path)),
                           ('r'::"char", tally_referrer_key(n.referrer, s.domain)),
                           ('c'::"char", nullif(n.country, ''))) d (dim, key)
WHERE n.site_id IS NOT NULL AND d.key IS NOT NULL GROUP BY 1, 2, 3, 4, 5, 6;

INSERT INTO site_rollup_visitors (site_id, grain, bucket, visitor)
SELECT DISTINCT n.site_id, g.grain, date_trunc(g.unit, n.ts, 'UTC'), n.ip_hash
FROM events n CROSS JOIN (VALUES ('h'::"char", 'hour'), ('d'::"char", 'day')) g (grain, unit)
WHERE n.site_id IS NOT NULL AND n.ip_hash IS NOT NULL;

-- Filtered reads, custom-event charts over 1h and the event log of one name.
CREATE INDEX events_site_name_ts ON events (site_id, name, ts) WHERE site_id IS NOT NULL;
