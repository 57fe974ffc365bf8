-- GET /v1/events?anonymous_id= lists the events sent with an anonymous id, newest first, as ?user_id= lists
-- a user's (events_ws_user). The partial index of migration 0015 held only anonymous events (user_id NULL),
-- without their order; this one holds every keyed event sent with an anonymous id, in the listing's order,
-- and still serves what the old one did (an alias's and an erasure's `user_id IS NULL AND anonymous_id = …`,
-- both also `site_id IS NULL`). The cost: identified keyed events that carry an anonymous id (analytics.js
-- sends both) are now indexed too.
DROP INDEX IF EXISTS events_ws_anonymous;
CREATE INDEX events_ws_anonymous ON events (workspace_id, env, anonymous_id, ts DESC, id DESC)
    WHERE anonymous_id IS NOT NULL AND site_id IS NULL;
