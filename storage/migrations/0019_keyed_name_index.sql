-- events_ws_name serves the keyed event listing filtered by name (storage/events.py, which always reads
-- `site_id IS NULL`); the reports that also used it now run on the analytics store. Site events never
-- need it (their event log has events_site_name_ts), so it no longer indexes them: one index insert less
-- per site event, about a tenth of PostgreSQL's cost of storing one.
DROP INDEX IF EXISTS events_ws_name;
CREATE INDEX events_ws_name ON events (workspace_id, env, name, ts DESC, id DESC) WHERE site_id IS NULL;
