"""The HTTP process's own work per ingested event, in process: microseconds of CPU per request through
routing, every middleware, the handler and the response object, with the actor replaced by one that
answers at once. No sockets, no HTTP parsing or writing, no flush: what bench/ingest.py cannot separate
from PostgreSQL and wrk sharing the same cores.

    .venv/bin/python bench/request_path.py [--batches 60] [--per-batch 300] [--tree DIR]

Needs a PostgreSQL server (BENCH_PG, as bench/ingest.py) for start-up and keys; creates and drops its own
database. Reports the least time per request over many short batches (the garbage collector off while a
batch runs), which other load on the machine hardly moves, beside a hello-world handler measured the same
way (it reads the body, parses it with orjson and answers a small JSON). `--tree DIR` measures the code
of another checkout (e.g. `git worktree add --detach DIR REV`) with this file, to compare revisions.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from urllib.parse import urlparse

import orjson
import uvloop
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request
from measured_tree import parse_args_with_tree  # bench/measured_tree.py

SINGLE_BODY = orjson.dumps({"event": "page_viewed", "user_id": "u42",
                            "properties": {"path": "/pricing", "plan": "pro"}})


class _Committed:
    """An actor whose every submission is already committed: the flush is not measured here."""

    def submit(self, kind: str, items: list, claim: object = None) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


class _Protocol:
    _reading_paused = False

    def resume_reading(self, *args: object, **kwargs: object) -> None:
        pass

    def pause_reading(self, *args: object, **kwargs: object) -> None:
        pass


class _Transport:
    _extra = {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return False


def _request(app: web.Application, path: str, headers: dict[str, str], body: bytes) -> web.Request:
    payload = StreamReader(_Protocol(), 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(body)
    payload.feed_eof()
    return make_mocked_request("POST", path, headers={**headers, "Content-Length": str(len(body))}, app=app,
                               payload=payload, transport=_Transport())


async def _measure(app: web.Application, make: Callable[[], web.Request], batches: int,
                   per_batch: int) -> tuple[float, float]:
    """(least, median) microseconds per request over the batches."""
    times = []
    for _ in range(batches):
        requests = [make() for _ in range(per_batch)]
        gc.collect()
        gc.disable()
        started = time.perf_counter()
        for request in requests:
            response = await app._handle(request)
        times.append((time.perf_counter() - started) / per_batch * 1e6)
        gc.enable()
        if response.status >= 300:
            raise RuntimeError(f"{request.path} answered {response.status}: {response.body!r}")
    return min(times), statistics.median(times)


async def main(batches: int, per_batch: int) -> None:
    # Imported here: --tree decides which checkout they come from.
    from app.appkeys import SUPERVISOR
    from app.server import init_app
    from app.settings import Settings
    from bench.ingest import ADMIN, CHROME_UA, _admin, setup, site_body

    name = f"tally_bench_path_{secrets.token_hex(4)}"
    await _admin(f'CREATE DATABASE "{name}"')
    dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
    runner = hello_runner = None
    data_dir = tempfile.mkdtemp(prefix="tally-bench-path-")
    try:
        keys, _, _ = await setup(dsn)
        os.environ.update({"DATABASE_URL": dsn, "TALLY_ENV": "development", "TALLY_IP_EVENTS_PER_MIN": "0",
                           "TALLY_SITE_EVENTS_PER_MIN": "0", "TALLY_DATA_DIR": data_dir,
                           "TALLY_MIRROR_INTERVAL_MS": "600000"})
        app = init_app(Settings.from_env())
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        app[SUPERVISOR].actor = lambda key: _Committed()
        sent = iter(range(10**9))

        def single() -> web.Request:
            key = keys[next(sent) % len(keys)]
            return _request(app, "/v1/events", {"Content-Type": "application/json",
                                                "Authorization": f"Bearer {key}"}, SINGLE_BODY)

        site = site_body().encode()

        def site_event() -> web.Request:
            return _request(app, "/api/service/event", {
                "Content-Type": "text/plain", "User-Agent": CHROME_UA, "Origin": "https://bench.example",
                "Referer": "https://bench.example/pricing"}, site)

        hello = web.Application()

        async def hello_handler(request: web.Request) -> web.Response:
            orjson.loads(await request.read())
            return web.Response(body=b'{"status":"received"}', content_type="application/json")

        hello.router.add_post("/{tail:.*}", hello_handler)
        hello_runner = web.AppRunner(hello)
        await hello_runner.setup()
        for make in (single, site_event):  # keys, the site row and the parsers' caches warm up first
            for _ in range(200):
                await app._handle(make())
        print(f"least (median) microseconds per request over {batches} batches of {per_batch}")
        for label, target, make in (
                ("hello-world handler", hello, lambda: _request(hello, "/", {}, SINGLE_BODY)),
                ("POST /v1/events", app, single), ("POST /api/service/event", app, site_event)):
            least, median = await _measure(target, make, batches, per_batch)
            print(f"  {label:26} {least:6.1f} ({median:.1f})", flush=True)
    finally:
        if hello_runner is not None:
            await hello_runner.cleanup()
        if runner is not None:
            await runner.cleanup()
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--per-batch", type=int, default=300)
    args = parse_args_with_tree(parser)
    uvloop.run(main(args.batches, args.per_batch))
