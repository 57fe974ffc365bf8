-- A one-time import (a SQL or warehouse source without cursor_column) that is cut short resumes without
-- importing its committed rows again: each page keeps the 8-byte digests of the rows it imported (one bytea
-- of them per page, written in the page's transaction), the next sync skips the rows whose digest is there
-- (counted, so identical rows each count), and the rows go when the import completes.
CREATE TABLE data_source_import_digests (
    source_id text NOT NULL REFERENCES data_sources (id) ON DELETE CASCADE,
    digests   bytea NOT NULL
);
CREATE INDEX data_source_import_digests_source ON data_source_import_digests (source_id);
