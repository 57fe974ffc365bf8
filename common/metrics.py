"""Prometheus metrics, one registry per application (so two apps in a process, as in the tests, never
share counters), exposed at /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_COMMIT = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
_FLUSH = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)
_BATCH = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
_REPORT = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """Every collector of one application, registered in its own registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("tally_http_requests_total", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=r)
        self.request_seconds = Histogram("tally_http_request_seconds", "HTTP request latency by route",
                                         ["route"], registry=r, buckets=_LATENCY)
        self.ingest_seconds = Histogram("tally_ingest_seconds", "Time from enqueue to durable commit",
                                        ["actor"], registry=r, buckets=_COMMIT)
        self.batch_events = Histogram("tally_batch_events", "Events per flushed batch", ["actor"], registry=r,
                                      buckets=_BATCH)
        self.flush_seconds = Histogram("tally_flush_seconds",
                                       "Duration of one batch flush (COPY + profile upkeep + commit)",
                                       ["actor"], registry=r, buckets=_FLUSH)
        self.mailbox_depth = Gauge("tally_mailbox_events", "Events waiting in actor mailboxes", ["actor"],
                                   registry=r)
        self.events_ingested = Counter("tally_events_ingested_total", "Events committed to PostgreSQL",
                                       ["actor"], registry=r)
        self.events_rejected = Counter("tally_events_rejected_total", "Events refused or dropped, by reason",
                                       ["reason"], registry=r)
        self.actor_restarts = Counter("tally_actor_restarts_total",
                                      "Actors restarted by the supervisor after a crash", ["actor"], registry=r)
        self.actors_running = Gauge("tally_actors_running", "Live actor tasks", ["actor"], registry=r)
        self.source_runs = Counter("tally_source_runs_total", "Data-source check/sync runs by type and outcome",
                                   ["type", "outcome"], registry=r)
        self.source_rows = Counter("tally_source_rows_total", "Rows imported from data sources", ["type"],
                                   registry=r)
        self.report_run_seconds = Histogram("tally_report_run_seconds", "Report run time by type and outcome",
                                            ["type", "outcome"], registry=r, buckets=_REPORT)
        self.report_deliveries = Counter("tally_report_deliveries_total", "Scheduled report emails by outcome",
                                         ["outcome"], registry=r)
        self.dependency_outages = Counter("tally_dependency_outages_total",
                                          "Times a dependency (postgres, redis) became unreachable",
                                          ["dependency"], registry=r)
        self.dependency_fallbacks = Counter("tally_dependency_fallbacks_total",
                                            "Operations served from process memory while Redis was down",
                                            ["use"], registry=r)
        self.mirror_events = Counter("tally_analytics_mirrored_events_total",
                                     "Events written to the analytics store by the mirror", registry=r)
        self.mirror_round_seconds = Histogram("tally_analytics_mirror_round_seconds",
                                              "Duration of one mirror round that moved events", registry=r,
                                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.mirror_lag = Gauge("tally_analytics_lag_seconds",
                                "Age of the oldest committed event not yet in the analytics store", registry=r)
        self.mirror_pending = Gauge("tally_analytics_pending_events",
                                    "Committed events not yet in the analytics store", registry=r)
        self._route_children: dict[tuple[str, str, int], tuple] = {}

    def route(self, method: str, route: str, status: int) -> tuple:
        """(request counter, latency histogram) for these labels, resolved once per combination:
        labels() takes a lock and a dict lookup on every call."""
        key = (method, route, status)
        found = self._route_children.get(key)
        if found is None:
            found = self._route_children[key] = (self.requests.labels(method, route, str(status)),
                                                 self.request_seconds.labels(route))
        return found
