"""Real-browser tests: Debian's headless Chromium driven by pytest-playwright against a live server.

The app runs on a free loopback port in a background thread with its own event loop, on the run's test
database, in development mode (so an unverified site accepts events from 127.0.0.1). Tests talk to it
only through the browser and HTTP. Skipped when /usr/lib/chromium/chromium is not installed
(CI: `apt-get install -y chromium`).

Screenshots go to a temporary folder; with TALLY_SCREENSHOTS=1 they refresh docs/screenshots/.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from playwright.sync_api import Browser, BrowserType, Page, Playwright, sync_playwright

from app.appkeys import POOL
from app.server import init_app
from app.settings import Settings
from tests.browser import site_pages
from tests.conftest import password_hash

CHROMIUM = Path("/usr/lib/chromium/chromium")
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
# The ingestion endpoint drops events from user agents that say "HeadlessChrome"; a visitor's does not.
DESKTOP_UA = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/130.0.0.0 Safari/537.36")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = None if CHROMIUM.exists() else pytest.mark.skip(
        reason=f"{CHROMIUM} not installed (apt-get install -y chromium)")
    for item in items:
        if here in Path(str(item.fspath)).parents:
            # One worker runs this package's tests one after another (make test: --dist loadgroup), so the
            # package's live server, whose mirror timer writes to the run's store, is gone before that
            # worker's other tests run, as in a run on one worker.
            item.add_marker(pytest.mark.xdist_group("browser"))
            if skip is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM),
            "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]}


# pytest-playwright keeps Playwright running for the whole session, and while it runs the main thread
# counts as inside an event loop, which breaks every async test collected after this folder. These
# overrides end Playwright (and the browser) with this package instead.
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    pw = sync_playwright().start()
    yield pw
    pw.stop()


@pytest.fixture(scope="package")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    return getattr(playwright, browser_name)


@pytest.fixture(scope="package")
def launch_browser(browser_type_launch_args: dict, browser_type: BrowserType) -> Callable[..., Browser]:
    def launch(**kwargs: Any) -> Browser:
        return browser_type.launch(**{**browser_type_launch_args, **kwargs})

    return launch


@pytest.fixture(scope="package")
def browser(launch_browser: Callable[..., Browser]) -> Iterator[Browser]:
    browser = launch_browser()
    yield browser
    browser.close()


@pytest.fixture(scope="package")
def browser_context_args() -> dict:
    # Replaces pytest-playwright's own (which needs its session-wide Playwright for --device).
    return {"user_agent": DESKTOP_UA, "viewport": {"width": 1280, "height": 860},
            # What a CDN in front of the service would add; the server derives the country from it.
            "extra_http_headers": {"CF-IPCountry": "DE"}}


@dataclass
class LiveServer:
    base_url: str
    app: web.Application
    loop: asyncio.AbstractEventLoop

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        """Run a coroutine on the server's loop (its pool lives there) and wait for the result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


# The browser tests' package only: its app's mirror drains the run's whole outbox on a timer, and
# left running it would take the events of later tests whose app feeds another store (cluster mode).
@pytest.fixture(scope="package")
def live_server(database_url: str, tmp_path_factory: pytest.TempPathFactory,
                analytics_store) -> Iterator[LiveServer]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = Settings(database_url=database_url, secret="browser-test-" + "x" * 32,
                        data_dir=tmp_path_factory.mktemp("live"), run_scheduler=False)
    if "doh_url" in {f.name for f in dataclasses.fields(Settings)}:
        # Domain verification asks the test server's fake DNS-over-HTTPS resolver.
        settings = dataclasses.replace(settings, doh_url=f"{base_url}/__doh__")
    app = init_app(settings, analytics=analytics_store)
    site_pages.add_routes(app.router)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        state["runner"] = runner

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:  # surfaced to the fixture below
            state["error"] = exc
        started.set()
        if "error" not in state:
            loop.run_forever()

    thread = threading.Thread(target=serve, name="live-server", daemon=True)
    thread.start()
    started.wait(60)
    if "error" in state:
        raise state["error"]
    server = LiveServer(base_url, app, loop)
    yield server
    asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def npm_install(project: Path, package: str) -> None:
    """The packages `project`'s lockfile pins, in its node_modules. npm ci runs once, under a lock: the
    suite's workers may need the same project at the same time."""
    with open(Path(tempfile.gettempdir()) / f"tally-npm-{project.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (project / "node_modules" / package).exists():
            npm = shutil.which("npm")
            if npm is None:
                pytest.skip(f"npm is needed to install {package} ({project})")
            subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=project, check=True, timeout=300)


def npm_bundle(project: Path, package: str, entry: str) -> str:
    """`entry` bundled by esbuild into one script, from the packages `project`'s lockfile pins."""
    npm_install(project, package)
    built = subprocess.run([str(project / "node_modules" / ".bin" / "esbuild"), "--bundle", "--format=iife",
                            "--target=es2017", "--log-level=warning"],
                           input=entry, cwd=project, capture_output=True, text=True, check=True, timeout=120)
    return built.stdout


@contextlib.contextmanager
def customer_site(live_server: LiveServer, script_path: str, script: str,
                  extra: dict[str, str] | None = None) -> Iterator[dict]:
    """A customer website on another port of the loopback (another origin than Tally's): `script` (a bundled
    third-party tracker) at `script_path`, the HTML of `extra`'s paths, and `pages["html"]` at every other
    path. Yields {"pages", "port", "base"}."""
    pages: dict[str, str] = {}

    async def page(request: web.Request) -> web.Response:
        html = (extra or {}).get(request.path, pages.get("html", ""))
        return web.Response(text=html, content_type="text/html")

    async def bundle(request: web.Request) -> web.Response:
        return web.Response(text=script, content_type="text/javascript")

    async def start() -> tuple[web.AppRunner, int]:
        app = web.Application()
        app.router.add_get(script_path, bundle)
        app.router.add_get("/{tail:.*}", page)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]

    runner, port = live_server.run(start())
    try:
        yield {"pages": pages, "port": port, "base": f"http://127.0.0.1:{port}"}
    finally:
        live_server.run(runner.cleanup())


@pytest.fixture(autouse=True)
def _server_before_browser(live_server: LiveServer) -> None:
    """Start the server (and create the run's database, which uses asyncio.run) before Playwright's
    sync API starts: once it runs, the main thread counts as being inside an event loop."""


@pytest.fixture(autouse=True)
def no_script_errors(page: Page) -> Iterator[None]:
    """Every test also fails on an uncaught page exception or a console error (a CSP violation logs one);
    HTTP error statuses the tests provoke on purpose (a wrong password's 401) are not script errors."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("console", lambda msg: msg.type == "error" and not msg.text.startswith("Failed to load resource")
            and errors.append(f"console: {msg.text}"))
    yield
    assert errors == []


@pytest.fixture
def account(live_server: LiveServer) -> tuple[str, str]:
    """A dashboard account in a workspace of its own: (email, password)."""
    from storage import accounts

    email, password = f"{secrets.token_hex(4)}@example.com", "browser test password"

    async def create() -> None:
        async with live_server.app[POOL].acquire() as conn:
            await accounts.upsert_account(conn, email, password_hash(password), f"ws-{secrets.token_hex(6)}")

    live_server.run(create())
    return email, password


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("TALLY_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return DOCS_SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


def wait_for(check: Callable[[], object], what: str, timeout: float = 20.0) -> object:
    """Poll until check() gives a truthy value: ingestion commits asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
