"""A dependency flapping (fault walk-through, docs/benchmarks.md "Faults under load": a full disk where small
batches still fit, a Redis restart's pooled connections failing one by one) logs its first outage and its return
as before, then holds down: the outages and returns within the window after are summed up in one line at its end,
where they logged a pair of lines each (43 pairs in 40 s); and while Redis is down, one caller a second asks it
again. The outage book is driven directly, on a clock of the test's own."""

from __future__ import annotations

import logging

import asyncpg

from common.metrics import Metrics
from common.outages import HOLD_DOWN_SECONDS, POSTGRES, PROBE_SECONDS, QUIET_SECONDS, REDIS, Outages


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tally.outages"]


def _flap(outages: Outages, clock: Clock, times: int, step: float = 0.45) -> None:
    """`times` outages of `step` seconds each, each over after one success."""
    for _ in range(times):
        outages.down(POSTGRES, asyncpg.DiskFullError("could not extend file"), "ingestion answers 503")
        clock.now += step
        outages.up(POSTGRES)
        clock.now += step


def test_a_flapping_dependency_logs_one_pair_then_one_summary_per_window(caplog):
    caplog.set_level(logging.INFO, logger="tally.outages")
    clock = Clock()
    metrics = Metrics()
    outages = Outages(metrics, clock=clock)
    _flap(outages, clock, 43)  # 43 outages in about 40 s, as on the walk-through's full disk
    lines = _lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("postgres unreachable (DiskFullError: could not extend file)")
    assert lines[1] == "postgres reachable again"

    clock.now += HOLD_DOWN_SECONDS  # the window after the first return has ended: one line sums it up
    outages.tick()
    lines = _lines(caplog)
    assert lines[2:] == [f"postgres flapping: 42 more outages in the last {HOLD_DOWN_SECONDS:g}s, "
                         "not logged one by one; reachable now"], lines
    # Every outage is still counted in /metrics.
    assert metrics.dependency_outages.labels(POSTGRES)._value.get() == 43

    outages.tick()  # nothing more to say
    clock.now += HOLD_DOWN_SECONDS + 1
    outages.tick()  # a quiet window ends the hold-down silently
    assert len(_lines(caplog)) == 3
    outages.down(POSTGRES, ConnectionRefusedError(111, "refused"), "ingestion answers 503")  # a later outage: logged
    assert _lines(caplog)[3].startswith("postgres unreachable (ConnectionRefusedError")


def test_flapping_that_is_down_at_the_end_of_the_window_says_so_and_logs_its_return(caplog):
    caplog.set_level(logging.INFO, logger="tally.outages")
    clock = Clock()
    outages = Outages(clock=clock)
    _flap(outages, clock, 5)
    end = clock.now + HOLD_DOWN_SECONDS
    while clock.now < end:  # down again, and failing on past the window's end
        outages.down(POSTGRES, asyncpg.DiskFullError("could not extend file"), "ingestion answers 503")
        clock.now += 5
    outages.down(POSTGRES, asyncpg.DiskFullError("could not extend file"), "ingestion answers 503")
    lines = _lines(caplog)
    assert lines[2:] == [f"postgres flapping: 5 more outages in the last {HOLD_DOWN_SECONDS:g}s, "
                         "not logged one by one; unreachable now (DiskFullError: could not extend file); "
                         "ingestion answers 503 until it answers again"], lines
    outages.up(POSTGRES)
    assert _lines(caplog)[3:] == ["postgres reachable again"]  # its return is logged, and a new window starts
    _flap(outages, clock, 3)
    assert len(_lines(caplog)) == 4


def test_dependencies_hold_down_apart(caplog):
    caplog.set_level(logging.INFO, logger="tally.outages")
    clock = Clock()
    outages = Outages(clock=clock)
    _flap(outages, clock, 3)
    outages.down(REDIS, ConnectionRefusedError(111, "refused"), "sessions fall back to process memory")
    outages.up(REDIS)
    assert [line.split(" ")[0] for line in _lines(caplog)] == ["postgres", "postgres", "redis", "redis"]


def test_readiness_hears_an_ingestion_outage_until_a_commit_or_quiet_seconds():
    """What /readyz reads: the latest refused flush's error until one commits, or until QUIET_SECONDS pass with
    no refusal (a process out of rotation gets no events to find out with)."""
    clock = Clock()
    outages = Outages(clock=clock)
    assert outages.ingestion_outage() is None
    outages.ingestion_failed(asyncpg.DiskFullError("could not extend file"))
    assert outages.ingestion_outage() == "DiskFullError"
    outages.ingestion_committed()
    assert outages.ingestion_outage() is None
    outages.ingestion_failed(asyncpg.DiskFullError("could not extend file"))
    clock.now += QUIET_SECONDS
    assert outages.ingestion_outage() == "DiskFullError"
    clock.now += 1
    assert outages.ingestion_outage() is None


def test_while_redis_is_down_one_caller_a_second_asks_it_again():
    clock = Clock()
    book = Outages(Metrics(), clock)
    assert book.worth_trying(REDIS)
    book.fallback("rate_limits", ConnectionRefusedError("refused"))
    assert [book.worth_trying(REDIS) for _ in range(3)] == [False, False, False]
    clock.now += PROBE_SECONDS
    assert [book.worth_trying(REDIS) for _ in range(3)] == [True, False, False]  # one probe
    book.fallback("rate_limits", TimeoutError())  # it failed: the next probe a second after
    clock.now += PROBE_SECONDS / 2
    assert not book.worth_trying(REDIS)
    clock.now += PROBE_SECONDS / 2
    assert book.worth_trying(REDIS)
    book.up(REDIS)  # it answered: every caller asks it again
    assert [book.worth_trying(REDIS) for _ in range(3)] == [True, True, True]
