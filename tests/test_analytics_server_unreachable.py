"""A ClickHouse server (TALLY_ANALYTICS_URL) that cannot be reached is an outage like PostgreSQL's or Redis's:
app.outages.unreachable names it, so a read that meets it answers 503 with Retry-After (app/middlewares.py), a
scheduled delivery that meets it is retried (app/reports/schedule.py), and a read's wait for the mirror ends at
once instead of at its bound. It was a 500 with a traceback per request, and a delivery failed for good.

There is no ClickHouse server here, and clickhouse-connect's HTTP client connects when it is made, so a store
whose server goes away mid-run cannot be built: these tests take the error from the real client's failed
connection, and check that a query the engine refuses is still no outage."""

from __future__ import annotations

import socket

import clickhouse_connect
import orjson
import pytest
from clickhouse_connect.driver.exceptions import ClickHouseError

from app.outages import store_caught_up, unavailable, unreachable
from storage.clickhouse import AnalyticsStore


def _refused_connection() -> Exception:
    """What clickhouse-connect raises for a server that does not answer (a port bound but not listening)."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    try:
        clickhouse_connect.get_client(host="127.0.0.1", port=closed.getsockname()[1], connect_timeout=2)
    except Exception as exc:  # the error is what is under test
        return exc
    finally:
        closed.close()
    raise AssertionError("a client connected to a port where nothing listens")


def test_an_unreachable_analytics_server_is_an_outage_with_a_503_in_each_apis_shape():
    exc = _refused_connection()
    assert unreachable(exc) == "analytics"

    site = unavailable(unreachable(exc), site=True)
    assert (site.status, site.headers["Retry-After"]) == (503, "5")
    assert orjson.loads(site.body) == {"error": "service unavailable"}
    keyed = unavailable(unreachable(exc), site=False)
    assert (keyed.status, keyed.headers["Retry-After"]) == (503, "5")
    assert orjson.loads(keyed.body)["error"] == {
        "code": "unavailable", "message": "a storage dependency (analytics) is unreachable; retry shortly"}


async def test_a_mirror_catch_up_that_cannot_reach_the_server_is_that_outage(analytics_store: AnalyticsStore):
    """A read first waits for the mirror; a server that cannot be reached ends the wait with its outage (the 503
    above) rather than after the wait's bound; a store that refuses the insert (its disk full) still leaves the
    mirror behind, to be waited for."""
    exc = _refused_connection()

    async def away() -> None:
        raise exc

    with pytest.raises(type(exc)):
        await store_caught_up(away)

    async def refused() -> None:
        await analytics_store.command("INSERT INTO no_such_database.no_such_table VALUES (1)")

    assert await store_caught_up(refused) is False


async def test_a_query_the_engine_refuses_is_no_outage(analytics_store: AnalyticsStore):
    with pytest.raises(ClickHouseError) as refused:
        await analytics_store.query("SELECT no_such_function(1)")
    assert unreachable(refused.value) is None
