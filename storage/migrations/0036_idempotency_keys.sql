-- Idempotency-Key on POST /v1/events and /v1/events/batch: one row per key a workspace and key environment
-- used, inserted in the transaction that stores the request's events, so a retry racing the first request
-- waits on the key and then finds it (the messageId ledger of 0015, for the keyed API). request_sha256 tells
-- a retry from another request reusing the key; response holds the answer's exact bytes, given again to a
-- retry. Rows older than the window are pruned by a scheduled job; no foreign key, as in segment_messages.
CREATE TABLE idempotency_keys (
    workspace_id   bigint      NOT NULL,
    env            text        NOT NULL,
    key            text        NOT NULL,
    request_sha256 bytea       NOT NULL,
    response       bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, env, key)
);
-- BRIN: rows arrive in created_at order, and the prune job is the only reader; a btree would cost every insert.
CREATE INDEX idempotency_keys_created ON idempotency_keys USING brin (created_at);
