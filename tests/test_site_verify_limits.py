"""POST /api/verify asks the DNS-over-HTTPS resolver on every call: checks are limited per account, with a 429
and Retry-After in the site API's error shape; in process, or with REDIS_URL shared by every process."""

from __future__ import annotations

import dataclasses
import secrets
import time
from types import SimpleNamespace

import pytest

from tests.doh_server import start_doh
from tests.site_helpers import unique_domain


@pytest.fixture
async def doh(aiohttp_server):
    return await start_doh(aiohttp_server)


def _limiter_clock(monkeypatch) -> None:
    """The limiter's clock moves 2 s a call from the start of a minute picked at random far ahead: below the
    per-second pace, never across a minute boundary (where the sliding window rightly lets more through),
    and in Redis buckets that no other test run on the machine's Redis counts in."""
    start = (time.time() // 60 + 1 + secrets.randbelow(10**6)) * 60 + 1
    ticks = iter(start + 2 * i for i in range(25))
    monkeypatch.setattr("app.ratelimit.time", SimpleNamespace(time=lambda: next(ticks)))


@pytest.mark.parametrize("shared", [False, True], ids=["in-process", "redis"])
async def test_dns_checks_are_limited_per_account(make_client, settings, redis_url, doh, login, monkeypatch,
                                                  shared):
    config = dataclasses.replace(settings, doh_url=doh.url, redis_url=redis_url if shared else None)
    client = await make_client(config)
    email = await login(the_client=client)
    site = (await (await client.post("/api/sites", data={"domain": unique_domain()})).json())["id"]
    _limiter_clock(monkeypatch)

    answers = [await client.post(f"/api/verify?site={site}") for _ in range(11)]
    assert [a.status for a in answers] == [200] * 10 + [429]
    assert [(await a.json())["status"] for a in answers[:10]] == ["pending"] * 10
    assert await answers[-1].json() == {"error": "too many verification attempts"}
    assert int(answers[-1].headers["Retry-After"]) >= 1
    assert len(doh.queries) == 10  # the refused check asked no resolver
    assert (await client.get(f"/api/verify?site={site}")).status == 200  # showing the record is no check

    # Another account of the workspace checks on its own allowance.
    colleague = await make_client(config)
    await login(the_client=colleague)
    assert (await colleague.post(f"/api/verify?site={site}")).status == 200 and len(doh.queries) == 11
    if shared:  # the same account in another process finds its allowance spent
        other_process = await make_client(config)
        await login(email, the_client=other_process)
        assert (await other_process.post(f"/api/verify?site={site}")).status == 429 and len(doh.queries) == 11
