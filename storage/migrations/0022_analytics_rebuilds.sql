-- Rebuilds of the analytics store in progress (storage/analytics_mirror.py). A rebuild writes its row
-- before it empties any part of the store and deletes it once everything is written back, holding an
-- advisory lock meanwhile. A row whose rebuild no longer holds the lock (killed, crashed, interrupted) means
-- the store lacks events from the start of the UTC day of `since` (NULL: every event): the server and the
-- CLI queue those events to the mirror again.
CREATE TABLE analytics_rebuilds (
    id         bigserial PRIMARY KEY,
    since      timestamptz,
    started_at timestamptz NOT NULL DEFAULT now()
);
