-- Conversion goals of a site, as Plausible's Sites API has them: a custom event name, or a pageview
-- path pattern where `*` matches within a path segment and `**` across segments.
CREATE TABLE goals (
    id         text PRIMARY KEY,
    site_id    text NOT NULL REFERENCES sites (id) ON DELETE CASCADE,
    goal_type  text NOT NULL CHECK (goal_type IN ('event', 'page')),
    event_name text,
    page_path  text,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((goal_type = 'event') = (event_name IS NOT NULL)),
    CHECK ((goal_type = 'page') = (page_path IS NOT NULL))
);
CREATE UNIQUE INDEX goals_site_event ON goals (site_id, event_name) WHERE goal_type = 'event';
CREATE UNIQUE INDEX goals_site_page ON goals (site_id, page_path) WHERE goal_type = 'page';
