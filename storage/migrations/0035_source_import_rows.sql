-- A one-time import cut short resumed by reading every digest its pages had kept (0033: one bytea per page)
-- into memory first, as much as the rows imported before the cut. A resume now counts them here instead,
-- made from 0033's rows in one statement as it starts reading again, and asks about each page's rows by the
-- primary key. Pages keep writing one bytea each (0033), so an import that is never cut pays nothing more.
-- kept: the rows with this digest the import's committed pages imported. matched: the rows with it the
-- current sync has read again and skipped, so that identical rows each count: a row read while
-- matched < kept was imported before the cut.
CREATE TABLE data_source_import_rows (
    source_id text    NOT NULL REFERENCES data_sources (id) ON DELETE CASCADE,
    digest    bytea   NOT NULL,
    kept      integer NOT NULL,
    matched   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (source_id, digest)
);
