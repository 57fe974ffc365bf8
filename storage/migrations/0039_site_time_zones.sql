-- A site's time zone (an IANA name): the dashboard's days begin at its midnight, as in Plausible. Sites made
-- before keep UTC, the zone every read used until now.
ALTER TABLE sites ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC';
