-- The unfiltered dashboard reads the warmer makes rows for after each UTC midnight (app/dashboard_warmer.py),
-- kept here rather than in one process's memory: a restart or a deploy no longer leaves the next morning's
-- first openings cold, and every process's reads are warmed by whichever process claims the day.
CREATE TABLE dashboard_reads (
    site_id   text NOT NULL REFERENCES sites (id) ON DELETE CASCADE,
    range     text NOT NULL,
    property  text NOT NULL,  -- a breakdown's property, '' for the overview
    last_read date NOT NULL,
    PRIMARY KEY (site_id, range, property)
);
CREATE INDEX dashboard_reads_last_read ON dashboard_reads (last_read);

-- One row per UTC day whose warming a process has claimed: the first to insert it warms every read.
CREATE TABLE dashboard_warmings (
    day        date PRIMARY KEY,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
