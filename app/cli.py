"""The `tally` command: serve, keys, plans, migrations and the analytics store."""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import orjson

from app.embedded import EmbeddedPostgres
from app.keys import SCOPES, create_key
from app.plans import GROUPS, parse_limit
from app.schemas import EARLIEST, FUTURE_SKEW
from app.settings import ConfigError, Settings
from app.startup import (
    StartupError,
    check_listen_address,
    connecting_to_postgres,
    listening,
    mismatch_message,
    prepare_folders,
)
from app.timestamps import has_utc_time
from storage import accounts
from storage import workspaces as store
from storage.db import create_pool
from storage.migrate import SchemaTooNew, available, label, migrate, pending


def _serve(args: argparse.Namespace, settings: Settings) -> None:
    import uvloop
    from aiohttp import web

    from app.logs import AccessLogger, setup_logging
    from app.server import init_app

    setup_logging()
    uvloop.install()
    logging_args = {"access_log_class": AccessLogger} if settings.access_log else {"access_log": None}
    app = init_app(settings)
    app.on_startup.append(_tune_gc)  # after the cleanup contexts: pools, actors and caches exist by then
    from storage.analytics_mirror import StoreClaimed, StoreMismatch
    from storage.clickhouse import StoreBusy

    host, port = args.host or settings.host, args.port or settings.port
    check_listen_address(host, port)  # before anything starts
    prepare_folders(settings)
    try:
        with listening(host, port):
            web.run_app(app, host=host, port=port, shutdown_timeout=30, print=_log_ready, **logging_args)
    except (StoreBusy, StoreClaimed) as exc:
        print(f"tally serve: {exc}", file=sys.stderr)
        sys.exit(3)
    except StoreMismatch as exc:
        print(f"tally serve: {mismatch_message(exc, settings)}", file=sys.stderr)
        sys.exit(4)


def _log_ready(text: str) -> None:
    """In place of aiohttp's banner, which it prints once every address listens (start-up is over): one log
    line with the URLs."""
    found = re.search(r"Running on (.+?) =", text)
    urls = found.group(1) if found else text.splitlines()[0]
    every = " (every interface)" if "0.0.0.0" in urls or "[::]" in urls else ""
    logging.getLogger("tally.serve").info("tally serve ready: listening on %s%s", urls, every)


async def _tune_gc(app: object) -> None:
    """Garbage-collector settings for a long-running server. Everything made while starting lives as long as
    the process, so it is frozen out of the collector's reach: a full collection then scans only what requests
    made (it took 50-80 ms here, stalling every in-flight request). The first generation is collected after
    10,000 net allocations instead of 700: under load the objects of 64 in-flight requests alone passed 700,
    and each of those collections walked them all again, about 3% of the CPU."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000)


async def _current_schema(conn: asyncpg.Connection) -> None:
    """Before a command other than `migrate`: a new database is migrated (nothing older can be using it); one
    an older release migrated is refused, not migrated. Migrating it under that release's running server
    broke the server (its mirror failed every round, reports answered 500) until it was restarted."""
    missing = await pending(conn)
    if missing is None:
        await migrate(conn)
    elif missing:
        raise StartupError(f"the database schema is older than this release ({len(missing)} migrations pending: "
                           f"{', '.join(missing)}); run `tally migrate`, or start `tally serve`, which migrates "
                           "at start, once the servers of the older release are stopped")


async def _with_db(settings: Settings, work: Callable[[asyncpg.Connection], Awaitable[int]],
                   applied: list[int] | None = None) -> int:
    """Run `work` on a connection to a database of this release's schema. With `applied` (`tally migrate`) the
    database is migrated and the versions applied go into it; else an older schema is refused."""
    embedded = None
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        dsn = await asyncio.to_thread(embedded.start)
    try:
        async with connecting_to_postgres(dsn, embedded_in=embedded and embedded.data_dir):
            pool = await create_pool(dsn, min_size=1, max_size=2)
        try:
            async with pool.acquire() as conn:
                if applied is None:
                    await _current_schema(conn)
                else:
                    applied.extend(await migrate(conn))
                return await work(conn)
        finally:
            await pool.close()
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


def _scopes(text: str) -> list[str]:
    scopes = sorted({s.strip() for s in text.split(",") if s.strip()})
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise argparse.ArgumentTypeError(f"scopes must be a comma list of {', '.join(SCOPES)}")
    return scopes


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError("a port is between 1 and 65535")
    return port


def _iso(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an ISO 8601 timestamp") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError("the timestamp needs a timezone, e.g. 2027-01-01T00:00:00Z")
    if not has_utc_time(value):
        raise argparse.ArgumentTypeError(f"{text} is out of range: in UTC it falls outside the years 1 to 9999")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tally", description="Tally analytics server")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", help="address to listen on (default: HOST, else 0.0.0.0)")
    serve.add_argument("--port", type=_port, help="port to listen on (default: PORT, else 8000)")

    ck = sub.add_parser("create-key", help="create an API key and print it (shown only once)")
    ck.add_argument("--workspace", required=True, type=_workspace)
    ck.add_argument("--scopes", required=True, type=_scopes, help=f"comma list of {', '.join(SCOPES)}")
    ck.add_argument("--test", action="store_true", help="a test-environment key (tally_test_sk_...)")
    ck.add_argument("--name", default="default", help="a label shown by list-keys (default: default)")
    ck.add_argument("--expires", type=_future, help="ISO 8601 with a timezone, e.g. 2027-01-01T00:00:00Z")

    rk = sub.add_parser("revoke-key", help="revoke a key by its id")
    rk.add_argument("key_id")

    lk = sub.add_parser("list-keys", help="list a workspace's keys (never their values)")
    lk.add_argument("--workspace", required=True, type=_workspace)

    sp = sub.add_parser("set-plan", help="set a workspace's plan and custom limits")
    sp.add_argument("--workspace", required=True, type=_workspace)
    sp.add_argument("--plan", required=True, choices=["free", "pro", "enterprise"])
    sp.add_argument("--limit", action="append", default=[], metavar="GROUP=PER_SECOND/PER_MINUTE", type=_limit,
                    help=f"enterprise only, repeatable; GROUP is one of {', '.join(GROUPS)}")

    cu = sub.add_parser("create-user", help="create a dashboard user (or reset its password)")
    cu.add_argument("--workspace", required=True, type=_workspace)
    cu.add_argument("--email", required=True)
    cu.add_argument("--password", required=True)

    sub.add_parser("migrate", help="apply pending database migrations")

    an = sub.add_parser("analytics", help="the analytics store (ClickHouse) mirrored from PostgreSQL")
    an_sub = an.add_subparsers(dest="analytics_command", required=True)
    rb = an_sub.add_parser("rebuild", help="re-mirror events from PostgreSQL into the analytics store")
    rb.add_argument("--since", type=_date, help="only events at or after this UTC date (YYYY-MM-DD)")
    an_sub.add_parser("status", help="mirror lag and row counts in PostgreSQL and the analytics store")
    return p


def _future(text: str) -> datetime:
    value = _iso(text)
    if value <= datetime.now(UTC):
        raise argparse.ArgumentTypeError(f"{text} is in the past: a key expiring then could never be used")
    return value


def _date(text: str) -> datetime:
    """A rebuild's first day: within the days events can have (app.schemas.EARLIEST to a day from now); the
    store could not read one outside them (a traceback)."""
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a date, YYYY-MM-DD") from None
    if day < EARLIEST:
        raise argparse.ArgumentTypeError(f"no event is older than {EARLIEST:%Y-%m-%d}: run `tally analytics "
                                         "rebuild` without --since to rebuild every event")
    if day > datetime.now(UTC) + FUTURE_SKEW:
        raise argparse.ArgumentTypeError(f"{text} is in the future: there is nothing to rebuild from it")
    return day


def _limit(text: str) -> str:
    try:
        parse_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _workspace(text: str) -> str:
    if not text.strip():  # `--workspace "$WS"` with WS unset made a workspace named ""
        raise argparse.ArgumentTypeError("a workspace name cannot be empty")
    return text


def _check_text(args: argparse.Namespace) -> None:
    """Bytes that are not UTF-8 (a terminal in another encoding) arrive as lone surrogates, which PostgreSQL
    cannot be sent (asyncpg raised a traceback): a usage error naming the argument."""
    for name, value in vars(args).items():
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:
                parser().error(f"argument {name.replace('_', '-')}: {value!r} is not valid UTF-8")


async def _create_key(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    _, raw = await create_key(conn, workspace=args.workspace, scopes=args.scopes, test=args.test,
                              name=args.name, expires_at=args.expires)
    print(raw)
    return 0


async def _revoke_key(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    if await store.revoke_key(conn, args.key_id):
        print(f"revoked {args.key_id}")
        return 0
    print(f"no active key with id {args.key_id}", file=sys.stderr)
    return 1


async def _list_keys(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    workspace = await store.workspace_by_name(conn, args.workspace)
    if workspace is None:
        print(f"no workspace named {args.workspace}", file=sys.stderr)
        return 1
    print("id\tenv\tname\tscopes\tprefix\texpires_at\trevoked_at\tcreated_at")
    for k in await store.list_keys(conn, workspace["id"]):
        print("\t".join(str(v) if v is not None else "-" for v in (
            k["id"], k["env"], k["name"], ",".join(k["scopes"]), k["prefix"] + "…",
            k["expires_at"], k["revoked_at"], k["created_at"])))
    return 0


async def _set_plan(conn: asyncpg.Connection, args: argparse.Namespace) -> int:
    limits = {}
    for item in args.limit:
        group, value = parse_limit(item)
        limits[group] = list(value)
    if limits and args.plan != "enterprise":
        print("custom limits are for the enterprise plan", file=sys.stderr)
        return 2
    workspace = await store.workspace_by_name(conn, args.workspace)
    if workspace is None:  # a typo must not make a workspace (create-key and create-user make them)
        print(f"no workspace named {args.workspace}", file=sys.stderr)
        return 1
    await store.set_plan(conn, workspace["id"], args.plan, limits)
    print(f"workspace {args.workspace}: plan {args.plan}")
    return 0


async def _create_user(conn: asyncpg.Connection, args: argparse.Namespace, *, redis_url: str | None = None) -> int:
    from redis.exceptions import RedisError

    from app.dashboard_session import end_account_sessions, hash_password

    if "@" not in args.email or len(args.password) < 8:
        print("need an email address and a password of at least 8 characters", file=sys.stderr)
        return 2
    account_id = await accounts.upsert_account(conn, args.email.strip().lower(), hash_password(args.password),
                                               args.workspace)
    print(f"user {args.email} in workspace {args.workspace}")
    # A reset password ends the sessions signed in with the old one (a new account has none).
    try:
        ended = await end_account_sessions(conn, redis_url, account_id)
    except (RedisError, OSError) as exc:
        print(f"the password is set, but its signed-in sessions could not be ended: Redis: {exc}", file=sys.stderr)
        return 1
    if ended:
        print(f"{ended} signed-in sessions ended")
    return 0


async def _migrate(conn: asyncpg.Connection, args: argparse.Namespace, applied: list[int]) -> int:
    # Said, so that an operator upgrading sees what the upgrade did to the database.
    names = {version: name for version, name, _ in available()}
    for version in applied:
        print(f"applied migration {label(version, names[version])}")
    print("database schema is up to date")
    return 0


async def _analytics(settings: Settings, args: argparse.Namespace) -> int:
    """Opens the store itself. Embedded (chDB) while `tally serve` runs on the same data directory: refused,
    as the directory belongs to the server. A ClickHouse server: runs beside a live Tally (rebuild takes
    the mirror's lock, so no round interleaves)."""
    from app.server import open_analytics
    from storage import analytics_mirror
    from storage.clickhouse import StoreBusy

    prepare_folders(settings)
    try:
        store = await asyncio.to_thread(open_analytics, settings)
    except StoreBusy as exc:
        print(f"{exc}; stop the server first, or read `tally_analytics_lag_seconds` from /metrics",
              file=sys.stderr)
        return 3

    async def work(conn: asyncpg.Connection) -> int:
        full_rebuild = args.analytics_command == "rebuild" and args.since is None
        if not full_rebuild:  # which makes the store mirror this database, whatever it mirrored
            try:
                adopted = await analytics_mirror.check_origin(conn, store)
            except analytics_mirror.StoreMismatch as exc:
                print(mismatch_message(exc, settings), file=sys.stderr)
                return 4
            if adopted is not None:
                print(f"the analytics store now records that it mirrors the database {adopted}", file=sys.stderr)
        if store.refill_needed and args.analytics_command != "rebuild":
            queued = await analytics_mirror.refill(conn)
            print(f"the analytics store was emptied for its new layout: {queued} events queued to mirror "
                  "again (or run `tally analytics rebuild`)", file=sys.stderr)
        if args.analytics_command == "rebuild":
            written = await analytics_mirror.rebuild(conn, store, since=args.since)
            print(f"rebuilt: {written} events written to the analytics store")
            return 0
        resumed = await analytics_mirror.resume_interrupted(conn)
        if resumed:
            print(f"an interrupted rebuild left the analytics store without {resumed} events: queued to mirror "
                  "again (or run `tally analytics rebuild`)", file=sys.stderr)
        status = await analytics_mirror.status(conn, store)
        print(orjson.dumps(status.json(), option=orjson.OPT_INDENT_2).decode())
        return 0

    try:
        return await _with_db(settings, work)
    finally:
        await asyncio.to_thread(store.close)


COMMANDS = {
    "create-key": _create_key, "revoke-key": _revoke_key, "list-keys": _list_keys,
    "set-plan": _set_plan, "create-user": _create_user, "migrate": _migrate,
}


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    _check_text(args)
    try:
        settings = Settings.from_env()
        if args.command == "serve":
            _serve(args, settings)
            return
        if args.command == "analytics":
            sys.exit(asyncio.run(_analytics(settings, args)))
        command, applied = COMMANDS[args.command], None
        if args.command == "create-user":
            command = functools.partial(_create_user, redis_url=settings.redis_url)
        if args.command == "migrate":
            applied = []
            command = functools.partial(_migrate, applied=applied)
        code = asyncio.run(_with_db(settings, lambda conn: command(conn, args), applied))
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        code = 2
    except (StartupError, SchemaTooNew) as exc:
        print(f"start-up error: {exc}", file=sys.stderr)
        code = 1
    sys.exit(code)
