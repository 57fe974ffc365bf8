"""The analytics store's schema, as SQL text: the tables, the `events_in` table every insert goes through
and the views that derive the stored columns and the per-session and per-day rows from it. The store
(storage/clickhouse_layout.py creates them); the reads (storage/analytics*.py, report_queries.py) use the
derived expressions by name.
"""

from __future__ import annotations

# The raw event fields the mirror sends (storage/analytics_mirror.py COPYs them out of PostgreSQL as CSV, in
# this order). They land in `events_in`, a Null table that keeps nothing: its materialized views derive
# the stored columns (page key, referrer host, visitor and session hashes) and route site events, engagement
# events and keyed events to their tables, so the server process handles no event row one by one.
INPUT_COLUMNS = (
    "id", "workspace_id", "env", "site_id", "name", "ts", "user_id", "anonymous_id", "session_id", "ip_hash",
    "path", "referrer", "country", "browser", "browser_version", "os", "os_version", "device", "utm_source",
    "utm_medium", "utm_campaign", "utm_term", "utm_content", "source", "channel", "region", "city", "properties",
)
_DIMENSIONS = ("browser", "browser_version", "os", "os_version", "device", "utm_source", "utm_medium",
               "utm_campaign", "utm_term", "utm_content", "source", "channel", "region", "city")
INPUT_TABLE = f"""
(
    {", ".join(f"{c} UInt64" if c == "workspace_id" else f"{c} DateTime64(6, 'UTC')" if c == "ts" else f"{c} String"
               for c in INPUT_COLUMNS)}
)
ENGINE = Null
"""


def _key_hash(column: str) -> str:
    """A visitor or session key as a UInt64 (0: none): grouping by it is far cheaper than by the string."""
    return f"if({column} = '', 0, greatest(cityHash64({column}), 1))"


# Plausible's engagement events (its tracker sends one when a page is hidden or left: how far it was scrolled
# and for how long it was seen) are stored in PostgreSQL as site events of this name, their two numbers as
# props (app/views/ingest.py), and routed by the views below to site_engagement, not site_events: they are no
# events, pageviews or visit activity in any count, only the pages' scroll depth and time on page
# (storage/analytics_engagement.py).
ENGAGEMENT = "engagement"
SCROLL_DEPTH = "$scroll_depth"  # percent, 0-100
ENGAGED_MS = "$engagement_time"  # ms the page was visible and focused since its pageview (or the last report)
# The page: the path without query string or fragment, but with a hash route (`#/settings`, `#!/x`, what
# Plausible's hash mode sends), which is a page of a hash-routed app as in Plausible's lists; an anchor
# (`#top`) and a route's own query string are cut. Keep in step with actors.realtime.page_key.
# The referrer host: lower-cased, without scheme, user info, port and "www."; the site's own domain is
# excluded at read time (a site's domain may change). A referrer that is not an absolute URL (no
# `scheme://`, e.g. "not a url" from a server-side sender) has no host, as in Plausible, rather than
# becoming a top referrer named by its text.
PAGE_KEY = r"replaceRegexpOne(path, '(?s)^([^?#]*)(?:[?][^#]*)?(#!?/[^?]+)?.*$', '\1\2')"
REFERRER_HOST = (r"if(match(referrer, '^[A-Za-z][A-Za-z0-9+.-]*://'), replaceRegexpOne(lower(referrer), "
                 r"'(?s)^[^:]*://(?:[^/?#]*@)?(?:www\.)?([^/?#:]*).*$', '\1'), '')")
_SITE_SELECT = (
    f"SELECT site_id, ts, id, name, {_key_hash('session_id')} AS session, {_key_hash('ip_hash')} AS visitor, "
    f"{PAGE_KEY} AS page, referrer, {REFERRER_HOST} AS referrer_host, country, {', '.join(_DIMENSIONS)}, "
    "properties FROM {source} WHERE site_id != '' AND name "
)
SITE_FROM_INPUT = _SITE_SELECT + f"!= '{ENGAGEMENT}'"
ENGAGEMENT_FROM_INPUT = _SITE_SELECT + f"= '{ENGAGEMENT}'"
KEYED_FROM_INPUT = (
    "SELECT workspace_id, env, name, ts, id, user_id, "
    "if(user_id != '', user_id, if(anonymous_id != '', concat('anon:', anonymous_id), '')) AS actor, "
    "properties FROM {source} WHERE site_id = ''"
)
# Read as PostgreSQL's CSV is written: only double quotes quote, and spaces are data.
CSV_INPUT_SETTINGS = {"format_csv_allow_single_quotes": 0, "input_format_csv_trim_whitespaces": 0,
                      "input_format_csv_empty_as_default": 1,
                      # An insert (a rebuild's is 64 MB of CSV) goes in blocks of 100,000 rows, parsed one at
                      # a time: each block goes through the views and is written before the next, so memory
                      # stays bounded (1M-row blocks parsed in parallel passed the 1 GiB query bound).
                      "max_insert_block_size": 100_000, "min_insert_block_size_rows": 100_000,
                      "min_insert_block_size_bytes": 0, "input_format_parallel_parsing": 0,
                      # chDB's client spools an insert's data to a file and inserts FROM INFILE, which chDB
                      # (as clickhouse-local) reads through a memory mapping by default, so the whole file
                      # became resident in the process: a month of 1.9 GB of CSV inserted at once put it at
                      # 3.2 GB RSS, 2 GB of them the file's pages. Read with pread: 1.3 GB, same time.
                      "storage_file_read_method": "pread"}

LC = "LowCardinality(String)"
# Event times are sorted within each day and event name (and country and browser, for site events) of both
# event tables: stored as differences, they compress 14x or more, and a 30-day read of 10M site events
# spends 12 ms instead of 80 ms on them (the window's bounds make every read load the column).
TS_CODEC = "CODEC(Delta(8), LZ4)"  # spelled as system.columns shows it
# Columns that barely compress (64-bit hashes; times, tie-breaks and ids in session order, not time order)
# are stored raw: chDB's LZ4 costs more to decompress them than reading the raw bytes does. At 10M events,
# the 30-day session read (2M session rows) went 243 -> 167 ms, an entry-page breakdown 310 -> 200 ms,
# and the window's distinct visitors (10M hashes) 138 -> 104 ms; the store holds ~25 more bytes per event.
RAW = "CODEC(NONE)"
# Columns of site_events that filters and breakdowns group or match, each with at most thousands of values
# per site: LowCardinality, so grouping reads dictionary positions and a function of the column (contains,
# the site's own referrer host) runs once per distinct value of a part. Stores from before get them
# converted when opened (the page first, then the rest: 25-30 % off the lists and UTM breakdowns at 10M).
LC_SITE_COLUMNS = ("page", "referrer_host", "utm_source", "utm_campaign", "utm_term", "utm_content", "city")


def _site_events_table(ts_codec: str, last: str, order: str) -> str:
    """A table of site_events' columns (the times in `ts_codec`), then `last` (columns or an index), sorted by
    `order`."""
    return f"""
(
    site_id LowCardinality(String),
    ts DateTime64(6, 'UTC'){ts_codec},
    id String,
    name {LC},
    session UInt64 {RAW},
    visitor UInt64 {RAW},
    page {LC},
    referrer String,
    referrer_host {LC},
    country {LC},
    browser {LC}, browser_version {LC}, os {LC}, os_version {LC}, device {LC},
    utm_source {LC}, utm_medium {LC}, utm_campaign {LC}, utm_term {LC}, utm_content {LC},
    source {LC}, channel {LC}, region {LC}, city {LC},
    properties String,
    {last}
)
ENGINE = {{engine}}
PARTITION BY toYYYYMM(ts)
ORDER BY ({order})
"""


# Site events: one row per event, ordered for "one site, a date range, then the event name", the shape
# of every dashboard read, then by country and browser: low-cardinality values that stay the same through a
# visit and are among the most used filters, so a filter on either reads only its own granules of each day
# (a third of the time of a 3-filter breakdown at 10M events; filters on other columns scan the day). A
# ReplacingMergeTree whose sorting key ends in the event id collapses the copies a retried mirror batch
# may insert (a copy has the same values, so the same key); queries read with FINAL so they never count a
# copy twice. Stores from before this key are re-sorted when opened (storage/clickhouse_layout.py).
SITE_ORDER = "site_id, toDate(ts), name, country, browser, ts, id"
SITE_TABLE = _site_events_table(f" {TS_CODEC}", "INDEX page_idx page TYPE bloom_filter(0.01) GRANULARITY 4",
                                SITE_ORDER)
# Engagement events: site_events' columns, so a read's filters apply to them alike, and their two numbers
# taken out of the props once, at insert. Ordered by day, page, then visit: a read asks for a page list's pages
# and groups each page's visits, so it reads only those pages' granules of each day (at 10M events and 8M
# engagement events, the unfiltered Top pages' engagement took 300 ms in site_events' order, 66 ms in this).
# The event id ends the key, as in site_events, so a batch's copies collapse and FINAL reads count each once.
ENGAGEMENT_ORDER = "site_id, toDate(ts), page, session, id"
# No page index (the page leads the key), and times in the default codec: Delta is for rows in time order.
ENGAGEMENT_TABLE = _site_events_table(
    "", f"scroll_depth UInt8 MATERIALIZED least(JSONExtractUInt(properties, '{SCROLL_DEPTH}'), 100),\n"
        f"    engaged_ms UInt32 MATERIALIZED JSONExtractUInt(properties, '{ENGAGED_MS}')", ENGAGEMENT_ORDER)
# A report's actor as a number, 0 for none: reports group and join actors by it rather than by the string
# (half the time of a funnel's entry scan at 10M events). A 64-bit hash: two of a million actors share one
# with a chance of about 3 in 100 million.
ACTOR_KEY = "if(actor = '', 0, cityHash64(actor))"
# Keyed events, ordered as the reports read them: one workspace/env, the report's event names, time.
KEYED_TABLE = f"""
(
    workspace_id UInt64,
    env {LC},
    name {LC},
    ts DateTime64(6, 'UTC') {TS_CODEC},
    id String,
    user_id String,
    actor String,
    properties String,
    actor_key UInt64 MATERIALIZED {ACTOR_KEY}
)
ENGINE = {{engine}}
PARTITION BY toYYYYMM(ts)
ORDER BY (workspace_id, env, name, ts, id)
"""
# Sessions kept by the engine, one row per (site, UTC day, session): the first and last event of the
# session on that day, the least and greatest 64-bit hash of its pageviews' event ids, its visitor, and its
# first and last pageview with a page as (rank, ts, id, page) tuples (the entry and exit page: min/max
# of the tuple is argMin/argMax of the page by (ts, id); rank puts every other event behind them, with an
# empty page). A materialized view fills it from every insert into site_events; the AggregatingMergeTree
# merges the rows of one key with min/max, which are idempotent, so a mirror batch written twice changes
# nothing. No count is kept: "exactly one pageview" is "least = greatest pageview id hash" (no pageview:
# greatest 0 < least max). The defaults of the later columns are the neutral elements of min/max, so
# rows written before them merge with derived ones unchanged.
SESSIONS_TABLE = f"""
(
    site_id LowCardinality(String),
    day Date,
    session UInt64 {RAW},
    first SimpleAggregateFunction(min, DateTime64(6, 'UTC')) {RAW},
    last SimpleAggregateFunction(max, DateTime64(6, 'UTC')) {RAW},
    pv_min SimpleAggregateFunction(min, UInt64) {RAW},
    pv_max SimpleAggregateFunction(max, UInt64) {RAW},
    {{visit_columns}}
)
ENGINE = {{engine}}
PARTITION BY toYYYYMM(day)
ORDER BY (site_id, day, session)
"""
PV_MIN = "if(name = 'pageview', cityHash64(id), 18446744073709551615)"
PV_MAX = "if(name = 'pageview', cityHash64(id), 0)"
PAGE_TUPLE = "Tuple(UInt8, DateTime64(6, 'UTC'), String, String)"
_NO_PAGE = "toDateTime64(0, 6, 'UTC'), '', ''"
_HAS_PAGE = "name = 'pageview' AND page != ''"
ENTRY_NONE, EXIT_NONE = f"CAST((1, {_NO_PAGE}) AS {PAGE_TUPLE})", f"CAST((0, {_NO_PAGE}) AS {PAGE_TUPLE})"
# An event's entry and exit candidates (per event; min/max over a session give its entry and exit page).
ENTRY = f"if({_HAS_PAGE}, CAST((0, ts, id, page) AS {PAGE_TUPLE}), {ENTRY_NONE})"
EXIT = f"if({_HAS_PAGE}, CAST((1, ts, id, page) AS {PAGE_TUPLE}), {EXIT_NONE})"
VISIT_COLUMNS = {
    "visitor": f"SimpleAggregateFunction(max, UInt64) {RAW}",
    "entry": f"SimpleAggregateFunction(min, {PAGE_TUPLE}) DEFAULT {ENTRY_NONE} {RAW}",
    "exit": f"SimpleAggregateFunction(max, {PAGE_TUPLE}) DEFAULT {EXIT_NONE} {RAW}",
}
SESSIONS_TABLE = SESSIONS_TABLE.replace(
    "{visit_columns}", ",\n    ".join(f"{c} {t}" for c, t in VISIT_COLUMNS.items()))
# The session-day states of site_events rows (the view's query, and the backfill's).
SESSION_STATES = (
    "SELECT site_id, toDate(ts) AS day, session, min(ts) AS first, max(ts) AS last, "
    f"min({PV_MIN}) AS pv_min, max({PV_MAX}) AS pv_max, max(visitor) AS visitor, "
    f"min({ENTRY}) AS entry, max({EXIT}) AS exit "
    "FROM {source} WHERE session != 0 GROUP BY site_id, day, session"
)
# Tables whose rows each hold a large state (a day's or a window's visitor set): one row per granule, so a
# read of one day deserializes that day's state, not those of the 8,192 rows sharing its granule (today's
# visitors at 10M events: 29 -> 5 ms). Stores from before get these tables made again (storage/clickhouse_layout.py).
ROW_GRANULES = "SETTINGS index_granularity = 1"
STATE_TABLES = ("site_days", "site_window_visitors")
# Per site and UTC day: when an insert last touched the day (`written`, the server's clock) and the day's
# visitors (a uniqExact state: a set, so a batch written twice changes nothing), fed by a view like the
# sessions. The visitors of whole days are merged from here instead of hashed again from every event.
DAYS_TABLE = f"""
(
    site_id LowCardinality(String),
    day Date,
    written SimpleAggregateFunction(max, DateTime64(6, 'UTC')),
    visitors AggregateFunction(uniqExact, UInt64)
)
ENGINE = {{engine}}
PARTITION BY toYYYYMM(day)
ORDER BY (site_id, day)
{ROW_GRANULES}
"""
DAY_STATES = ("SELECT site_id, toDate(ts) AS day, max(now64(6, 'UTC')) AS written, "
              "uniqExactStateIf(visitor, visitor != 0) AS visitors FROM {source} GROUP BY site_id, day")
# Event counts of ended days, per event name and per page, referrer host and country (dim 0, 1, 2; dim 3
# is the name's total, key ''; dim 5 per UTC hour, key the hour), and the visits that started on the day
# (dim 4, name the UTC hour they started in, keys visits, bounces, duration_us), computed from site_events
# read with FINAL (and from site_sessions) by the first read that needs a day (storage/analytics_days.py),
# never by a view: counts are not idempotent under a batch written twice, a FINAL read is. Each computation
# is stamped `computed` and completed by a marker row (dim 255, with 254, 253 and 252 beside it for the
# visits, the hourly counts and the visits per hour); a day's counts are used only while its last complete
# computation is newer than its `written` (plus the store's settle time), its visits only while it is newer
# than the `written` of the day and of the days before and after, so an insert into a day, late events or a
# rebuild included, makes it computed again.
COUNTS_TABLE = """
(
    site_id LowCardinality(String),
    day Date,
    computed DateTime64(6, 'UTC'),
    name LowCardinality(String),
    dim UInt8,
    key String,
    c UInt64
)
ENGINE = {engine}
PARTITION BY toYYYYMM(day)
ORDER BY (site_id, day, computed, name, dim, key)
"""
# The visitors of a run of ended days, cached by the first unfiltered overview that needs them: one state
# merged from site_days instead of a state per day (30 states at 200,000 visitors: 50 ms of a 30-day
# overview). A row is used only while it is newer than the last insert into its days (site_days' `written`,
# plus the settle time), as the day counts are; rows are made at most once a day per window, and kept two.
WINDOW_VISITORS_TABLE = f"""
(
    site_id LowCardinality(String),
    first Date,
    last Date,
    computed DateTime64(6, 'UTC'),
    visitors AggregateFunction(uniqExact, UInt64)
)
ENGINE = {{engine}}
ORDER BY (site_id, first, last, computed)
TTL toDateTime(computed) + INTERVAL 2 DAY
{ROW_GRANULES}
"""
# The visitors (and for goals the events) per key over a run of ended days, cached by the first unfiltered
# read that needs them, as the window's visitors are above: per value of an event dimension (dim: the
# breakdown's name of it) or per goal of the site's goals (dim: "goals " and a digest of their conditions).
# The rows of one computation (`computed`) are completed by a marker row (key ''); a read merges them with
# the states of the window's other days instead of hashing every event's visitor
# (storage/analytics_breakdown.py). The states hold random hashes: stored raw, as the event columns of hashes
# are.
WINDOW_KEYS_TABLE = f"""
(
    site_id LowCardinality(String),
    first Date,
    last Date,
    dim LowCardinality(String),
    computed DateTime64(6, 'UTC'),
    key String,
    visitors AggregateFunction(uniqExact, UInt64) {RAW},
    events UInt64
)
ENGINE = {{engine}}
ORDER BY (site_id, first, last, dim, computed, key)
TTL toDateTime(computed) + INTERVAL 2 DAY
{ROW_GRANULES}
"""
# The codecs other than the default, per table and column: stores from before get them when opened.
CODECS = {"site_events": {"ts": TS_CODEC, "session": RAW, "visitor": RAW},
          "site_engagement": {"session": RAW, "visitor": RAW},
          "keyed_events": {"ts": TS_CODEC},
          "site_sessions": dict.fromkeys(("session", "first", "last", "pv_min", "pv_max", *VISIT_COLUMNS), RAW),
          "site_window_keys": {"visitors": RAW}}
TABLES = {"site_events": (SITE_TABLE, "cityHash64(site_id)", "ReplacingMergeTree"),
          "site_engagement": (ENGAGEMENT_TABLE, "cityHash64(site_id)", "ReplacingMergeTree"),
          "keyed_events": (KEYED_TABLE, "workspace_id", "ReplacingMergeTree"),
          "site_sessions": (SESSIONS_TABLE, "cityHash64(site_id)", "AggregatingMergeTree"),
          "site_days": (DAYS_TABLE, "cityHash64(site_id)", "AggregatingMergeTree"),
          "site_day_counts": (COUNTS_TABLE, "cityHash64(site_id)", "MergeTree"),
          "site_window_visitors": (WINDOW_VISITORS_TABLE, "cityHash64(site_id)", "MergeTree"),
          "site_window_keys": (WINDOW_KEYS_TABLE, "cityHash64(site_id)", "MergeTree")}

# Which PostgreSQL database the store mirrors (storage/analytics_mirror.py: check_origin): one row, written
# when a store is first opened against a database and again by a full rebuild. A cluster keeps it through a
# Distributed table like the others (on one shard; read from all).
ORIGIN = "mirrored_database"
ORIGIN_TABLE = """(
    system_identifier String,
    database String,
    database_oid UInt32,
    adopted DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY tuple()
"""
