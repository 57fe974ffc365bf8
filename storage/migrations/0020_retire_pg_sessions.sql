-- Visits are kept by the analytics store (site_sessions, fed by the mirror; entry and exit pages derived
-- from site_events), and nothing reads the PostgreSQL sessions table any more: its statement trigger
-- (0010) only cost every site COPY a grouped upsert, about a fifth of PostgreSQL's cost of storing a site
-- event. Session ids stay on the events themselves (events.session_id), assigned at ingestion.
DROP TRIGGER IF EXISTS events_site_sessions ON events;
DROP FUNCTION IF EXISTS tally_site_sessions();
DROP TABLE IF EXISTS sessions;
