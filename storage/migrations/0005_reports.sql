-- Saved reports, their scheduled deliveries, and the sandbox that runs custom (customer-written) SQL.

CREATE TABLE reports (
    id           text PRIMARY KEY,
    workspace_id bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    env          text NOT NULL CHECK (env IN ('live', 'test')),
    name         text NOT NULL,
    type         text NOT NULL CHECK (type IN ('event_volume', 'funnel', 'retention', 'custom')),
    config       jsonb NOT NULL,
    schedule     jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    last_run_at  timestamptz,
    -- Set exactly when schedule is; advanced in the same transaction that records a delivery.
    next_run_at  timestamptz
);
CREATE INDEX reports_page ON reports (workspace_id, env, id);
CREATE INDEX reports_due ON reports (next_run_at) WHERE next_run_at IS NOT NULL;

-- One row per scheduled slot that was claimed; pending rows are (re)tried until sent or out of attempts.
CREATE TABLE report_deliveries (
    id          bigserial PRIMARY KEY,
    report_id   text NOT NULL REFERENCES reports (id) ON DELETE CASCADE,
    due_at      timestamptz NOT NULL,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts    integer NOT NULL DEFAULT 0,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz,
    UNIQUE (report_id, due_at)
);
CREATE INDEX report_deliveries_pending ON report_deliveries (created_at) WHERE status = 'pending';

-- ---------------------------------------------------------------------------------------------
-- Custom SQL sandbox. The customer's SELECT runs as tally_report_reader, a NOLOGIN role without
-- superuser or BYPASSRLS, inside tally_report.run_sql(), a SECURITY DEFINER function owned by that
-- role: PostgreSQL refuses SET ROLE / RESET ROLE / set_config('role', ...) inside a security-definer
-- function, so the query cannot climb back to the connection's (superuser) session role.
-- The role can read only the events and user_profiles columns granted below, filtered by row-level
-- security to the scope the service set for the transaction (tally.workspace_id, tally.env). Those
-- settings are signed (tally.scope_sig = sha256 of a secret the role cannot read), so a query that
-- calls set_config('tally.workspace_id', ...) itself sees no rows at all.
-- Roles are cluster-wide: create it once, tolerating another database's migration racing us.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tally_report_reader') THEN
        BEGIN
            CREATE ROLE tally_report_reader NOLOGIN NOSUPERUSER NOINHERIT NOCREATEDB NOCREATEROLE NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    -- A non-superuser service role must be a member to SET ROLE to it (superusers always may).
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE format('GRANT tally_report_reader TO %I', current_user);
    END IF;
END
$$;

CREATE TABLE report_scope_secret (secret text NOT NULL);
INSERT INTO report_scope_secret VALUES (gen_random_uuid()::text || gen_random_uuid()::text);
REVOKE ALL ON report_scope_secret FROM PUBLIC;

CREATE FUNCTION tally_report_scope_sig(ws bigint, env text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT encode(sha256(convert_to(s.secret || ':' || ws::text || ':' || env, 'UTF8')), 'hex')
    FROM public.report_scope_secret s
$$;
REVOKE ALL ON FUNCTION tally_report_scope_sig(bigint, text) FROM PUBLIC;

-- Called by the service (before switching role) to scope the transaction.
CREATE FUNCTION tally_report_enter_scope(ws bigint, env text) RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT set_config('tally.workspace_id', ws::text, true), set_config('tally.env', env, true),
           set_config('tally.scope_sig', public.tally_report_scope_sig(ws, env), true)
$$;
REVOKE ALL ON FUNCTION tally_report_enter_scope(bigint, text) FROM PUBLIC;

-- The verified scope: NULL (so no row matches) unless the settings carry the service's signature.
CREATE FUNCTION tally_report_scope_workspace() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN current_setting('tally.scope_sig', true) = public.tally_report_scope_sig(
                    nullif(current_setting('tally.workspace_id', true), '')::bigint,
                    current_setting('tally.env', true))
           THEN nullif(current_setting('tally.workspace_id', true), '')::bigint END
$$;
CREATE FUNCTION tally_report_scope_env() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN current_setting('tally.scope_sig', true) = public.tally_report_scope_sig(
                    nullif(current_setting('tally.workspace_id', true), '')::bigint,
                    current_setting('tally.env', true))
           THEN current_setting('tally.env', true) END
$$;

-- Row-level security applies to the reader only: the service connects as the tables' owner (or a
-- superuser), which bypasses RLS, so ingestion and every other query are unaffected.
ALTER TABLE events ENABLE ROW LEVEL SECURITY;
ALTER TABLE user_profiles ENABLE ROW LEVEL SECURITY;
CREATE POLICY report_reader_scope ON events FOR SELECT TO tally_report_reader
    USING (workspace_id = (SELECT tally_report_scope_workspace()) AND env = (SELECT tally_report_scope_env()));
CREATE POLICY report_reader_scope ON user_profiles FOR SELECT TO tally_report_reader
    USING (workspace_id = (SELECT tally_report_scope_workspace()) AND env = (SELECT tally_report_scope_env()));
GRANT SELECT (workspace_id, env, site_id, id, name, user_id, anonymous_id, properties, ts, received_at)
    ON events TO tally_report_reader;
GRANT SELECT (workspace_id, env, user_id, traits, created_at, last_seen_at, event_count)
    ON user_profiles TO tally_report_reader;

-- What custom SQL sees: tally_report.events and tally_report.users (first on its search_path).
CREATE SCHEMA tally_report;
REVOKE ALL ON SCHEMA tally_report FROM PUBLIC;
GRANT USAGE ON SCHEMA tally_report TO tally_report_reader;
CREATE VIEW tally_report.events WITH (security_invoker = true, security_barrier = true) AS
    SELECT id, name AS event, user_id, anonymous_id, properties, ts AS "timestamp", received_at
    FROM public.events WHERE site_id IS NULL;
CREATE VIEW tally_report.users WITH (security_invoker = true, security_barrier = true) AS
    SELECT user_id, traits, created_at, last_seen_at, event_count FROM public.user_profiles;
GRANT SELECT ON tally_report.events, tally_report.users TO tally_report_reader;

-- Runs one SELECT (wrapped as a subquery, so it cannot be another kind of statement) and returns
-- at most max_rows rows as JSON objects that keep column order.
CREATE FUNCTION tally_report.run_sql(query text, max_rows integer) RETURNS SETOF json
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = tally_report, pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY EXECUTE format(E'SELECT row_to_json(q) FROM (\n%s\n) q LIMIT %s', query, max_rows);
END
$$;
REVOKE ALL ON FUNCTION tally_report.run_sql(text, integer) FROM PUBLIC;
ALTER FUNCTION tally_report.run_sql(text, integer) OWNER TO tally_report_reader;
