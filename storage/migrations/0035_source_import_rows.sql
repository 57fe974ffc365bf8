-- A one-time import cut short resumed by reading every digest its pages had kept (0033: one bytea per page)
-- into memory first, as much as the rows imported before the cut. The digests are now kept one row per
-- distinct digest, counted, so that the resume asks about each page's rows only (by the primary key).
-- kept: the rows with this digest the import's committed pages imported. matched: the rows with it the
-- current sync has read so far, imported or skipped, so that identical rows each count: a row read while
-- matched < kept was imported before the cut, and is skipped. A resumed import sets matched back to 0 as it
-- starts reading again.
CREATE TABLE data_source_import_rows (
    source_id text    NOT NULL REFERENCES data_sources (id) ON DELETE CASCADE,
    digest    bytea   NOT NULL,
    kept      integer NOT NULL,
    matched   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (source_id, digest)
);
INSERT INTO data_source_import_rows (source_id, digest, kept)
SELECT source_id, substring(digests FROM i * 8 + 1 FOR 8), count(*)
FROM data_source_import_digests, generate_series(0, length(digests) / 8 - 1) AS i
GROUP BY 1, 2;
DROP TABLE data_source_import_digests;
