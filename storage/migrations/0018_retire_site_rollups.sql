-- Site analytics aggregates are answered by the analytics store (ClickHouse, fed by the outbox of 0017),
-- so the rollups of migration 0004 and the triggers that kept them are retired: they made every site
-- COPY about twice as slow and serialized concurrent flushes of one site on the same rollup rows.
-- Kept from 0004: events_site_name_ts, which the event log (still on PostgreSQL) reads.
DROP TRIGGER IF EXISTS events_site_rollup ON events;
DROP TRIGGER IF EXISTS sessions_rollup_insert ON sessions;
DROP TRIGGER IF EXISTS sessions_rollup_update ON sessions;
DROP TRIGGER IF EXISTS sessions_rollup_delete ON sessions;
DROP FUNCTION IF EXISTS tally_site_rollup();
DROP FUNCTION IF EXISTS tally_session_rollup();
DROP FUNCTION IF EXISTS tally_page_key(text);
DROP FUNCTION IF EXISTS tally_referrer_key(text, text);
DROP TABLE IF EXISTS site_rollup_counts;
DROP TABLE IF EXISTS site_rollup_dims;
DROP TABLE IF EXISTS site_visitors;
DROP TABLE IF EXISTS site_session_rollups;
