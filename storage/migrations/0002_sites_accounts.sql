-- Dashboard accounts, sites with DNS verification, and visitor sessions of the site API.

CREATE TABLE accounts (
    id            bigserial PRIMARY KEY,
    email         text NOT NULL UNIQUE,
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memberships (
    account_id   bigint NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    role         text NOT NULL DEFAULT 'owner',
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, workspace_id)
);

CREATE TABLE sites (
    id                 text PRIMARY KEY,
    workspace_id       bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    domain             text NOT NULL,
    verification_token text NOT NULL,
    verified_at        timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, domain)
);
CREATE INDEX sites_workspace ON sites (workspace_id, created_at DESC);

-- One row per visit, maintained by the site actor, so bounce rate and duration never scan events.
CREATE TABLE sessions (
    site_id     text NOT NULL,
    id          text NOT NULL,
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz NOT NULL,
    pageviews   integer NOT NULL DEFAULT 0,
    events      integer NOT NULL DEFAULT 0,
    entry_path  text,
    exit_path   text,
    referrer    text,
    country     text,
    PRIMARY KEY (site_id, id)
);
CREATE INDEX sessions_site_started ON sessions (site_id, started_at);

CREATE INDEX events_site_ts ON events (site_id, ts) WHERE site_id IS NOT NULL;
