-- Visit dimensions of site events, filled at ingestion (site actor) and mirrored to the analytics
-- store: device data parsed from the User-Agent, UTM fields and aliases from the page URL, the source
-- and channel derived from them and the referrer, and region/city from a GeoIP City database.
-- Nullable and without defaults, so adding them rewrites no partition; keyed events leave them NULL.
ALTER TABLE events
    ADD COLUMN browser         text,
    ADD COLUMN browser_version text,
    ADD COLUMN os              text,
    ADD COLUMN os_version      text,
    ADD COLUMN device          text,
    ADD COLUMN utm_source      text,
    ADD COLUMN utm_medium      text,
    ADD COLUMN utm_campaign    text,
    ADD COLUMN utm_term        text,
    ADD COLUMN utm_content     text,
    ADD COLUMN source          text,
    ADD COLUMN channel         text,
    ADD COLUMN region          text,
    ADD COLUMN city            text;
