"""Prometheus metrics, one registry per application (so two apps in a process, as in the tests, never
share counters), exposed at /metrics."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_COMMIT = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
_FLUSH = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)
_BATCH = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
_REPORT = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """Every collector of one application, registered in its own registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        # Counted once or more per request, on the event loop: LoopCounter and LoopHistogram (below).
        self.requests = LoopCounter("tally_http_requests_total", "HTTP requests by route and status",
                                    ["method", "route", "status"], registry=r)
        self.request_seconds = LoopHistogram("tally_http_request_seconds", "HTTP request latency by route",
                                             ["route"], registry=r, buckets=_LATENCY)
        self.ingest_seconds = LoopHistogram("tally_ingest_seconds", "Time from enqueue to durable commit",
                                            ["actor"], registry=r, buckets=_COMMIT)
        self.batch_events = Histogram("tally_batch_events", "Events per flushed batch", ["actor"], registry=r,
                                      buckets=_BATCH)
        self.flush_seconds = Histogram("tally_flush_seconds",
                                       "Duration of one batch flush (COPY + profile upkeep + commit)",
                                       ["actor"], registry=r, buckets=_FLUSH)
        self.mailbox_depth = LoopGauge("tally_mailbox_events", "Events waiting in actor mailboxes", ["actor"],
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
        self.exported_events = Counter("tally_exported_events_total",
                                       "Events read into site export downloads, by format", ["format"],
                                       registry=r)
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


# -- metrics of the request path -----------------------------------------------------------------------------
# prometheus_client takes a lock for every update (a Histogram.observe takes two, after a walk of its
# buckets): about 3 µs of each ingested event went to the request counter, the latency and commit
# histograms and the mailbox gauge. These are updated by request handlers and actors and read by the
# /metrics view, all on the event loop's thread, so their values are plain numbers. The exposition is
# prometheus_client's own (the same families, samples and `_created` series; tests/test_metrics.py).


class _LoopFamily:
    """A labelled family whose children are updated and read on one thread (the event loop's)."""

    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: list[str], registry: CollectorRegistry) -> None:
        self._name, self._documentation, self._labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], object] = {}
        registry.register(self)

    def labels(self, *values: object):
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            if len(key) != len(self._labelnames):
                raise ValueError(f"{self._name} takes labels {self._labelnames}")
            child = self._children[key] = self._child()
        return child

    def _child(self) -> object:
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self._name, self._documentation, self.kind)
        for values, child in list(self._children.items()):
            child.add_samples(metric, self._name, dict(zip(self._labelnames, values, strict=True)))
        yield metric


class _CounterChild:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value, self.created = 0.0, time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount

    def add_samples(self, metric: Metric, name: str, labels: dict[str, str]) -> None:
        metric.add_sample(name + "_total", labels, self.value)
        metric.add_sample(name + "_created", labels, self.created)


class LoopCounter(_LoopFamily):
    kind = "counter"

    def __init__(self, name: str, documentation: str, labelnames: list[str], registry: CollectorRegistry) -> None:
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry)

    def _child(self) -> _CounterChild:
        return _CounterChild()


class _GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)

    def add_samples(self, metric: Metric, name: str, labels: dict[str, str]) -> None:
        metric.add_sample(name, labels, self.value)


class LoopGauge(_LoopFamily):
    kind = "gauge"

    def _child(self) -> _GaugeChild:
        return _GaugeChild()


class _HistogramChild:
    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds, self.counts, self.sum, self.created = bounds, [0] * len(bounds), 0.0, time.time()

    def observe(self, amount: float) -> None:
        # The first bucket whose upper bound is at least the amount, as prometheus_client picks it.
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount

    def add_samples(self, metric: Metric, name: str, labels: dict[str, str]) -> None:
        total = 0.0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            total += count
            metric.add_sample(name + "_bucket", {**labels, "le": floatToGoString(bound)}, total)
        metric.add_sample(name + "_count", labels, total)
        metric.add_sample(name + "_sum", labels, self.sum)
        metric.add_sample(name + "_created", labels, self.created)


class LoopHistogram(_LoopFamily):
    kind = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: list[str], registry: CollectorRegistry,
                 buckets: tuple[float, ...]) -> None:
        super().__init__(name, documentation, labelnames, registry)
        self._bounds = (*sorted(float(b) for b in buckets), float("inf"))

    def _child(self) -> _HistogramChild:
        return _HistogramChild(self._bounds)
