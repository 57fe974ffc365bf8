-- A month's partition is made as a table of its own and then attached. `CREATE TABLE … PARTITION OF
-- events` takes ACCESS EXCLUSIVE on events: it waited for every read of events in progress (a custom
-- SQL report runs for up to its statement timeout), and every flush of every workspace queued behind it
-- (found by a walk-through: one back-dated event held another workspace's ingestion for seconds).
-- ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on events, which conflicts with neither reads nor
-- COPY; the new, empty table is locked alone, and its indexes and the parent's triggers come with the
-- attachment. The advisory lock still keeps processes that make the same month at once from colliding;
-- after it, the month is looked for with a query, whose snapshot is taken then: to_regclass reads the
-- catalog as this backend last saw it, which an advisory lock does not refresh, so a process that waited
-- for another's lock found no table and failed on CREATE ("already exists").
CREATE OR REPLACE FUNCTION tally_ensure_event_partition(month_start timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lo timestamptz := date_trunc('month', month_start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    hi timestamptz := lo + interval '1 month';
    part text := 'events_' || to_char(lo AT TIME ZONE 'UTC', 'YYYY_MM');
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('tally_event_partitions'));
    IF EXISTS (SELECT 1 FROM pg_class WHERE relname = part
               AND relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'events'::regclass)) THEN
        RETURN;  -- another process made it while this one waited
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE '
                   'INCLUDING COMPRESSION)', part);
    EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
END
$$;
