-- Data sources: connection settings (credentials encrypted by the app), status and sync schedule.
CREATE TABLE data_sources (
    id             text PRIMARY KEY,
    workspace_id   bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    env            text NOT NULL CHECK (env IN ('live', 'test')),
    name           text NOT NULL,
    type           text NOT NULL,
    status         text NOT NULL CHECK (status IN ('testing', 'active', 'syncing', 'error', 'paused')),
    status_reason  text,
    credentials    bytea NOT NULL,
    options        jsonb NOT NULL DEFAULT '{}'::jsonb,
    frequency      text NOT NULL CHECK (frequency IN ('hourly', 'daily', 'weekly')),
    sync_time      text NOT NULL,
    sync_cursor    jsonb,
    rows_imported  bigint NOT NULL DEFAULT 0,
    next_sync_at   timestamptz,
    -- A runner owns the source until lease_until; an expired lease means its process died.
    lease_until    timestamptz,
    last_synced_at timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX data_sources_page ON data_sources (workspace_id, env, id);
CREATE INDEX data_sources_due ON data_sources (next_sync_at) WHERE status <> 'paused';
