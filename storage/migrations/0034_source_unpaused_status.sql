-- What resume puts back: the status a paused source would have, had it not been paused, as far as resume
-- needs to know it. 'testing' while its connection check (and first sync) has not passed, so that resume
-- makes it `testing` again and the check runs; resume made it `active` (or `syncing`) with the check never
-- finished. NULL when the source is not paused (and for sources paused before this migration: they resume
-- as before).
ALTER TABLE data_sources ADD COLUMN unpaused_status text;
