-- Scheduled deliveries retry a failed send or an unavailable run with a growing delay until a deadline, rather
-- than three times a minute apart (docs/decisions.md, "Scheduled delivery"). attempted_at: when the last attempt
-- began; next_attempt_at: when the next may begin (set as an attempt begins, so a crash waits too);
-- give_up_at: past it, a pending delivery fails with its last error. Deliveries claimed before this migration
-- get a day from their claim.
ALTER TABLE report_deliveries
    ADD COLUMN attempted_at    timestamptz,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN give_up_at      timestamptz;
UPDATE report_deliveries SET give_up_at = created_at + interval '24 hours';
ALTER TABLE report_deliveries ALTER COLUMN give_up_at SET NOT NULL;
DROP INDEX report_deliveries_pending;
CREATE INDEX report_deliveries_pending ON report_deliveries (next_attempt_at) WHERE status = 'pending';
