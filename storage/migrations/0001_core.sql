-- Core schema: workspaces, API keys, the shared events table, user profiles, erasures.

CREATE TABLE workspaces (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    plan        text NOT NULL DEFAULT 'free' CHECK (plan IN ('free', 'pro', 'enterprise')),
    rate_limits jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    env          text NOT NULL CHECK (env IN ('live', 'test')),
    name         text NOT NULL,
    scopes       text[] NOT NULL,
    key_hash     bytea NOT NULL UNIQUE,
    prefix       text NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_workspace ON api_keys (workspace_id, created_at);

-- One table for both APIs. Keyed events have site_id NULL; site events carry the page fields.
CREATE TABLE events (
    id           text NOT NULL,
    workspace_id bigint NOT NULL,
    env          text NOT NULL,
    site_id      text,
    name         text NOT NULL,
    user_id      text,
    anonymous_id text,
    session_id   text,
    properties   jsonb,
    url          text,
    path         text,
    referrer     text,
    title        text,
    viewport_w   integer,
    country      text,
    ip_hash      text,
    ts           timestamptz NOT NULL,
    received_at  timestamptz NOT NULL
) PARTITION BY RANGE (ts);

CREATE INDEX events_ws_ts ON events (workspace_id, env, ts DESC, id DESC);
CREATE INDEX events_ws_user ON events (workspace_id, env, user_id, ts DESC, id DESC) WHERE user_id IS NOT NULL;
CREATE INDEX events_ws_name ON events (workspace_id, env, name, ts DESC, id DESC);

-- Monthly partitions, created on demand by the flushing actor and ahead of time by a timer.
-- The advisory lock keeps processes that create the same month at once from colliding.
CREATE FUNCTION tally_ensure_event_partition(month_start timestamptz) RETURNS void
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
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                   part, lo, hi);
END
$$;

CREATE TABLE user_profiles (
    workspace_id bigint NOT NULL,
    env          text NOT NULL,
    user_id      text NOT NULL,
    seq          bigserial NOT NULL,
    traits       jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz,
    event_count  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, env, user_id)
);
CREATE INDEX user_profiles_page ON user_profiles (workspace_id, env, seq);
CREATE INDEX user_profiles_traits ON user_profiles USING gin (traits jsonb_path_ops);

-- Right-to-erasure tombstones: a flush drops events of an erased user received before the erasure,
-- so events still in some process's batch cannot resurrect the user.
CREATE TABLE erasures (
    workspace_id bigint NOT NULL,
    env          text NOT NULL,
    user_id      text NOT NULL,
    erased_at    timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, env, user_id, erased_at)
);
