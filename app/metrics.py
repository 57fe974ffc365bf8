"""Prometheus metrics, one registry per process, exposed at /metrics."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "tally_http_requests_total", "HTTP requests by route and status", ["method", "route", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "tally_http_request_seconds", "HTTP request latency by route", ["route"], registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
INGEST_SECONDS = Histogram(
    "tally_ingest_seconds", "Time from enqueue to durable commit", ["actor"], registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
)
BATCH_EVENTS = Histogram(
    "tally_batch_events", "Events per flushed batch", ["actor"], registry=REGISTRY,
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
)
FLUSH_SECONDS = Histogram(
    "tally_flush_seconds", "Duration of one batch flush (COPY + profile upkeep + commit)", ["actor"],
    registry=REGISTRY, buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
)
MAILBOX_DEPTH = Gauge(
    "tally_mailbox_events", "Events waiting in actor mailboxes", ["actor"], registry=REGISTRY
)
EVENTS_INGESTED = Counter(
    "tally_events_ingested_total", "Events committed to PostgreSQL", ["actor"], registry=REGISTRY
)
EVENTS_REJECTED = Counter(
    "tally_events_rejected_total", "Events refused or dropped, by reason", ["reason"], registry=REGISTRY
)
ACTOR_RESTARTS = Counter(
    "tally_actor_restarts_total", "Actors restarted by the supervisor after a crash", ["actor"],
    registry=REGISTRY,
)
ACTORS_RUNNING = Gauge("tally_actors_running", "Live actor tasks", ["actor"], registry=REGISTRY)
SOURCE_RUNS = Counter(
    "tally_source_runs_total", "Data-source check/sync runs by type and outcome", ["type", "outcome"], registry=REGISTRY
)
SOURCE_ROWS = Counter("tally_source_rows_total", "Rows imported from data sources", ["type"], registry=REGISTRY)
REPORT_RUN_SECONDS = Histogram(
    "tally_report_run_seconds", "Report run time by type and outcome", ["type", "outcome"], registry=REGISTRY,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
REPORT_DELIVERIES = Counter(
    "tally_report_deliveries_total", "Scheduled report emails by outcome", ["outcome"], registry=REGISTRY
)
MIRROR_EVENTS = Counter(
    "tally_analytics_mirrored_events_total", "Events written to the analytics store by the mirror", registry=REGISTRY
)
MIRROR_ROUND_SECONDS = Histogram(
    "tally_analytics_mirror_round_seconds", "Duration of one mirror round that moved events", registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
MIRROR_LAG = Gauge(
    "tally_analytics_lag_seconds", "Age of the oldest committed event not yet in the analytics store",
    registry=REGISTRY,
)
MIRROR_PENDING = Gauge(
    "tally_analytics_pending_events", "Committed events not yet in the analytics store", registry=REGISTRY
)
