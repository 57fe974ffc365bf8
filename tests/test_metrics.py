"""The request path's metrics (common/metrics.py: LoopCounter, LoopHistogram, LoopGauge) expose exactly what
prometheus_client's Counter, Histogram and Gauge expose for the same updates."""

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from common.metrics import LoopCounter, LoopGauge, LoopHistogram, Metrics

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.5, 1, 10)
AMOUNTS = [0, 0.0005, 0.001, 0.0011, 0.0025, 0.004, 0.01, 0.7, 1, 9.99, 10, 11, 1e9]


def _exposition(registry: CollectorRegistry) -> str:
    # The creation times differ by construction; everything else must not.
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", generate_latest(registry).decode())


def _fill(counter, histogram, gauge) -> None:
    for i, amount in enumerate(AMOUNTS):
        counter.labels("POST", "/v1/events", "200").inc()
        counter.labels("GET", "/v1/users", str(200 + i % 2)).inc(2.5)
        histogram.labels("/v1/events").observe(amount)
        histogram.labels("/api/service/event").observe(amount / 3)
        gauge.labels("site").inc(i)
        gauge.labels("site").dec(1)
    gauge.labels("workspace").set(7)


def test_loop_metrics_expose_what_prometheus_client_exposes():
    theirs, ours = CollectorRegistry(auto_describe=True), CollectorRegistry(auto_describe=True)
    assert _exposition(ours) == _exposition(theirs)
    _fill(Counter("tally_t_requests_total", "Requests", ["method", "route", "status"], registry=theirs),
          Histogram("tally_t_seconds", "Latency", ["route"], registry=theirs, buckets=BUCKETS),
          Gauge("tally_t_depth", "Depth", ["actor"], registry=theirs))
    _fill(LoopCounter("tally_t_requests_total", "Requests", ["method", "route", "status"], registry=ours),
          LoopHistogram("tally_t_seconds", "Latency", ["route"], registry=ours, buckets=BUCKETS),
          LoopGauge("tally_t_depth", "Depth", ["actor"], registry=ours))
    assert "tally_t_seconds_bucket" in _exposition(ours)
    assert _exposition(ours) == _exposition(theirs)


def test_loop_metrics_refuse_what_prometheus_client_refuses():
    registry = CollectorRegistry(auto_describe=True)
    counter = LoopCounter("tally_t_total", "T", ["a"], registry=registry)
    with pytest.raises(ValueError):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError):
        counter.labels("x", "y")
    with pytest.raises(ValueError):  # a second family of the same name in one registry
        Counter("tally_t_total", "T", ["a"], registry=registry)


def test_an_application_registers_each_request_metric_once():
    text = generate_latest(Metrics().registry).decode()
    for family in ("tally_http_requests_total", "tally_http_request_seconds", "tally_ingest_seconds",
                   "tally_mailbox_events"):
        assert text.count(f"# TYPE {family} ") == 1
