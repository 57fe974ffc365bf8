-- Shared links of a site (Plausible's "shared links"): each token opens that one site's overview
-- read-only, without signing in. Deleting the row revokes the link at once; deleting the site drops them.
CREATE TABLE site_shared_links (
    id         text PRIMARY KEY,
    site_id    text NOT NULL REFERENCES sites (id) ON DELETE CASCADE,
    token      text NOT NULL UNIQUE,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX site_shared_links_site ON site_shared_links (site_id, created_at);
