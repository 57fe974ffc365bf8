-- Keyed-API dashboards and their charts. Scoped by workspace AND env like every keyed resource.

CREATE TABLE dashboards (
    id           text PRIMARY KEY,
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    env          text NOT NULL CHECK (env IN ('live', 'test')),
    name         text NOT NULL,
    description  text,
    -- Set while shared publicly, NULL when private; a fresh token each time it goes public again.
    public_token text UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
-- Ids are time-sortable, so paging by id walks dashboards in creation order.
CREATE INDEX dashboards_page ON dashboards (workspace_id, env, id);

CREATE TABLE dashboard_charts (
    id           text PRIMARY KEY,
    dashboard_id text NOT NULL REFERENCES dashboards (id) ON DELETE CASCADE,
    position     integer NOT NULL,
    title        text NOT NULL,
    type         text NOT NULL CHECK (type IN ('line', 'bar', 'pie', 'funnel', 'table')),
    event        text NOT NULL,
    filters      jsonb NOT NULL DEFAULT '[]'::jsonb,
    group_by     text,
    -- Funnel charts only: the event names that follow `event`, in order.
    steps        jsonb,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_charts_order ON dashboard_charts (dashboard_id, position, id);
