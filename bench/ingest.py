"""Ingestion benchmark: durable Tally ingestion beside a hello-world server and raw COPY, one run.

    .venv/bin/python bench/ingest.py [--duration 5] [--connections 64] [--rounds 3] [--redis URL] [--ref REV ...]

Needs wrk (apt-get install wrk) and a PostgreSQL server (BENCH_PG, default the local one). Creates and
drops its own database. The method is an outsider's: `wrk -t2 -c64`, 5-second rounds alternating with a
hello-world that reads and parses its JSON body; the single-event load is spread over 32 keys of one
workspace on the default (free) plan, so no key passes the spec's 1,000 requests/s, with bodies for 5,000
random user ids; the site load has its per-IP and per-site limits off and sends a desktop Chrome
User-Agent, an Origin and a referrer. The batch and overload rows use one enterprise key with limits far
above the load, so they measure ingestion rather than rate limiting.

`--ref REV` also runs Tally as of git revision REV (a detached worktree, its own database and migrations)
in the same rounds, rotating which goes first, so a change is compared with the code before it on the
same machine in the same minutes. It may be given several times (one server each), to see what each of a
series of changes bought in one run. `--ref REV,NAME=VALUE,...` also sets environment variables for that
server alone (e.g. `--ref HEAD,TALLY_MIRROR_INTERVAL_MS=600000`: this code with the analytics mirror's
rounds off, beside the same code with them on). While Tally's own rounds run, /readyz is polled for the analytics
mirror's lag (how long committed events wait to reach the analytics store).

Besides the rates, it prints where each request's CPU went: the server's event-loop thread, its other threads,
its database's PostgreSQL backends, wrk itself and the whole machine, and how busy the loop and the machine were.
A loop busy ~100 % of the round while the machine is not sets the rate: the share of hello-world is then about
the ratio of the two servers' loop µs per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.keys import create_key  # noqa: E402
from storage import workspaces  # noqa: E402
from storage.db import init_connection  # noqa: E402
from storage.events import EVENT_COLUMNS, EventRow  # noqa: E402
from storage.ids import new_id  # noqa: E402
from storage.migrate import migrate  # noqa: E402
from tests.server_process import free_port  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
HUGE = [1_000_000, 60_000_000]

KEYS = 32  # free-plan keys of one workspace carrying the single-event load
CHROME_UA = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
             "Chrome/131.0.0.0 Safari/537.36")

# Each request picks one of the keys and one of 5,000 users at random.
SINGLE_LUA = """
local keys = {%s}
request = function()
  local body = '{"event":"page_viewed","user_id":"u' .. math.random(1, 5000) ..
               '","properties":{"path":"/pricing","plan":"pro"}}'
  local headers = {["Content-Type"] = "application/json",
                   ["Authorization"] = "Bearer " .. keys[math.random(1, #keys)]}
  return wrk.format("POST", nil, headers, body)
end
"""
SITE_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "text/plain"
wrk.headers["User-Agent"] = "%s"
wrk.headers["Origin"] = "https://bench.example"
wrk.headers["Referer"] = "https://bench.example/pricing"
wrk.body = [[%s]]
"""
STATIC_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "%s"
wrk.headers["Authorization"] = "Bearer %s"
wrk.body = [[%s]]
"""


def batch_body(n: int) -> str:
    return orjson.dumps({"events": [{"event": "page_viewed", "user_id": f"u{i % 5000}",
                                     "properties": {"path": "/pricing", "plan": "pro"}} for i in range(n)]}).decode()


def site_body() -> str:
    return orjson.dumps({"s": "bench.example", "n": "pageview", "u": "https://bench.example/pricing",
                         "p": "/pricing", "r": "https://news.example/", "t": "Pricing", "w": 1280}).decode()


class RssSampler(threading.Thread):
    """Peak resident size, and peak private (anonymous) memory: resident size less file-backed pages, most
    of which are the embedded chDB's 0.5 GB library, mapped read-only and shared with the page cache."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc, self.peak, self.peak_private, self.running = psutil.Process(pid), 0, 0, True

    def run(self) -> None:
        while self.running:
            try:
                mem = self.proc.memory_info()
            except psutil.Error:
                return
            self.peak = max(self.peak, mem.rss)
            self.peak_private = max(self.peak_private, mem.rss - mem.shared)
            time.sleep(0.1)


class LagSampler(threading.Thread):
    """Polls /readyz for the analytics mirror's lag while `active` (builds without the mirror report none)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url, self.samples, self.active = f"http://127.0.0.1:{port}/readyz", [], False

    def run(self) -> None:
        import urllib.request

        while True:
            if not self.active:
                time.sleep(0.05)
                continue
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    lag = orjson.loads(resp.read()).get("analytics", {}).get("lag_seconds")
                if lag is not None:
                    self.samples.append(float(lag))
            except OSError:
                pass
            time.sleep(0.2)


LOOP = "loop"  # cpu_seconds' key for the server's main thread, which runs its event loop


def cpu_seconds(pid: int, database: str | None) -> dict[int | str, float]:
    """User + system CPU of the server process (all its threads, chDB's included), of its main thread (the
    event loop: at ~1 s per second it is what bounds the rate) and of the PostgreSQL backends connected to
    its database (found by their process titles, "postgres: user database ...")."""
    found: dict[int | str, float] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            if proc.pid == pid or (database and cmd and cmd[0].startswith("postgres: ")
                                   and f" {database} " in cmd[0]):
                t = proc.cpu_times()
                found[proc.pid] = t.user + t.system
            if proc.pid == pid:
                found[LOOP] = next((t.user_time + t.system_time for t in proc.threads() if t.id == pid), 0.0)
        except psutil.Error:
            continue
    return found


def children_cpu() -> float:
    """CPU seconds of this process's finished children (each round's wrk)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_busy() -> float:
    """CPU seconds the whole machine spent outside idle and I/O wait, all cores together."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def wrk(url: str, script: str, duration: int, connections: int, pid: int, lag: LagSampler | None = None,
        database: str | None = None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    sampler = RssSampler(pid)
    sampler.start()
    if lag is not None:
        lag.active = True
    before, wrk_before, busy_before = cpu_seconds(pid, database), children_cpu(), machine_busy()
    started = time.monotonic()
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", "-s", f.name, url],
                         capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - started
    after, wrk_cpu, busy = cpu_seconds(pid, database), children_cpu() - wrk_before, machine_busy() - busy_before
    sampler.running = False
    if lag is not None:
        lag.active = False
    os.unlink(f.name)

    def ms(label: str) -> float:
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    # CPU per request is steadier than the rate on a shared machine: other load slows both servers down,
    # but hardly changes what each request costs.
    server_cpu = after.get(pid, 0.0) - before.get(pid, 0.0)
    loop_cpu = after.get(LOOP, 0.0) - before.get(LOOP, 0.0)
    pg_cpu = sum(v - before.get(k, 0.0) for k, v in after.items() if k not in (pid, LOOP))
    per = 1e6 / max(total, 1)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "p50": ms("50"), "p99": ms("99"),
            "server_us": server_cpu * per, "pg_us": pg_cpu * per, "loop_us": loop_cpu * per, "wrk_us": wrk_cpu * per,
            "machine_us": busy * per, "loop_busy": loop_cpu / wall, "machine_busy": busy / wall / os.cpu_count(),
            "requests": total, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(1) if errors else "", "rss_mb": sampler.peak / 2**20,
            "private_mb": sampler.peak_private / 2**20}


def start(cmd: list[str], env: dict, port: int, cwd: Path | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=cwd)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            import urllib.request
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except OSError as exc:
            if getattr(exc, "code", None):  # an HTTP error means it is listening
                return proc
            time.sleep(0.1)
    raise RuntimeError(f"{cmd} did not start")


async def raw_copy(dsn: str, workspace_id: int, duration: float, batch: int, connections: int,
                   table: str = "events") -> float:
    """asyncpg copy_records_to_table of the same rows into the same table, as fast as it goes."""
    now = datetime.now(UTC)

    def rows() -> list[tuple]:
        return [EventRow(new_id("evt"), workspace_id, "live", "page_viewed", now, now, user_id=f"u{i % 5000}",
                         properties={"path": "/pricing", "plan": "pro"})
                for i in range(batch)]

    copied = 0

    async def worker() -> None:
        nonlocal copied
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            records = rows()
            await conn.copy_records_to_table(table, records=records, columns=EVENT_COLUMNS)
            copied += len(records)
        await conn.close()

    started = time.monotonic()
    await asyncio.gather(*[worker() for _ in range(connections)])
    return copied / (time.monotonic() - started)


async def setup(dsn: str, *, migrated: bool = False) -> tuple[list[str], str, int]:
    """32 free-plan keys for single events; one enterprise key (another workspace) for batches. A database
    `migrated` by another revision's code gets its keys from this one (the key tables have not changed)."""
    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    if not migrated:
        await migrate(conn)
    free_keys = [(await create_key(conn, workspace="bench", scopes=["read", "write"], test=False,
                                   name=f"bench-{i}", expires_at=None))[1] for i in range(KEYS)]
    _, batch_key = await create_key(conn, workspace="bench-batch", scopes=["read", "write"], test=False,
                                    name="bench", expires_at=None)
    workspace_id = await workspaces.ensure_workspace(conn, "bench-batch")
    await workspaces.set_plan(conn, workspace_id, "enterprise", {g: HUGE for g in ("events", "identify", "query")})
    await conn.execute("SELECT tally_ensure_event_partition(now())")
    await conn.close()
    return free_keys, batch_key, workspace_id


def median_run(runs: list[dict]) -> dict:
    """The run with the median rate, so its latency and memory figures belong to one measurement."""
    return sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3,
                        help="hello-world / single-event / site rounds, interleaved (the machine drifts)")
    parser.add_argument("--redis", default="", metavar="URL",
                        help="run Tally with this REDIS_URL (shared limits, sessions, realtime)")
    parser.add_argument("--ref", action="append", default=[], metavar="REV",
                        help="also run Tally at this git revision in the same rounds, for an A/B in one run "
                             "(repeatable); REV,NAME=VALUE,... also sets environment variables for that server")
    args = parser.parse_args()

    name = f"tally_bench_{secrets.token_hex(4)}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
    procs: list[subprocess.Popen] = []
    # Each Tally under test has a prefix: "" for this tree, "ref1_", "ref2_" ... for the --ref revisions.
    prefixes = ["", *(f"ref{i + 1}_" for i in range(len(args.ref)))]
    rounds: dict[str, list[dict]] = {"hello": []} | {p + t: [] for p in prefixes for t in ("single", "site")}
    results: list[tuple[str, dict, int]] = []
    ref_dirs = [Path(tempfile.mkdtemp(prefix="tally-ref-")) / "tree" for _ in args.ref]
    ref_names = [f"{name}_ref{i + 1}" for i in range(len(args.ref))]
    data_dir = tempfile.mkdtemp(prefix="tally-bench-data-")
    ref_datas = [tempfile.mkdtemp(prefix="tally-bench-ref-") for _ in args.ref]
    try:
        free_keys, batch_key, workspace_id = asyncio.run(setup(dsn))
        hello_port, tally_port = free_port(), free_port()
        hello = start([sys.executable, str(ROOT / "bench" / "hello_server.py"), str(hello_port)], {}, hello_port)
        procs.append(hello)
        # All load comes from one loopback address: the per-IP and per-site drop limits would otherwise
        # turn the site endpoint's numbers into a measurement of silent drops.
        env = {"DATABASE_URL": dsn, "TALLY_ACCESS_LOG": "0", "TALLY_ENV": "development", "REDIS_URL": args.redis,
               "TALLY_IP_EVENTS_PER_MIN": "0", "TALLY_SITE_EVENTS_PER_MIN": "0", "TALLY_DATA_DIR": data_dir}
        serve = [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port"]
        tally = start([*serve, str(tally_port)], env, tally_port, cwd=ROOT)
        procs.append(tally)
        lag = LagSampler(tally_port)
        lag.start()
        d, c = args.duration, args.connections
        single = SINGLE_LUA % ", ".join(f'"{k}"' for k in free_keys)
        # (prefix, port, process, single-event script, lag sampler, database)
        servers = [("", tally_port, tally, single, lag, name)]
        for prefix, rev, ref_dir, ref_name, ref_data in zip(prefixes[1:], args.ref, ref_dirs, ref_names, ref_datas,
                                                             strict=True):
            rev, _, overrides = rev.partition(",")
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(ref_dir), rev], check=True,
                           capture_output=True)
            asyncio.run(_admin(f'CREATE DATABASE "{ref_name}"'))
            ref_dsn = urlparse(ADMIN)._replace(path=f"/{ref_name}").geturl()
            ref_env = {**env, "DATABASE_URL": ref_dsn, "TALLY_DATA_DIR": ref_data,
                       **dict(kv.split("=", 1) for kv in overrides.split(",") if kv)}
            subprocess.run([sys.executable, "-m", "app", "migrate"], cwd=ref_dir, env={**os.environ, **ref_env},
                           check=True, capture_output=True)
            ref_keys, _, _ = asyncio.run(setup(ref_dsn, migrated=True))
            ref_port = free_port()
            ref = start([*serve, str(ref_port)], ref_env, ref_port, cwd=ref_dir)
            procs.append(ref)
            servers.append((prefix, ref_port, ref, SINGLE_LUA % ", ".join(f'"{k}"' for k in ref_keys), None, ref_name))
        batch = STATIC_LUA % ("application/json", batch_key, batch_body(500))
        site = SITE_LUA % (CHROME_UA, site_body())
        site_probe = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                                     "-H", "Content-Type: text/plain", "-H", f"User-Agent: {CHROME_UA}",
                                     "-H", "Origin: https://bench.example", "--data", site_body(),
                                     f"http://127.0.0.1:{tally_port}/api/service/event"], capture_output=True,
                                    text=True).stdout
        if site_probe != "202":
            raise RuntimeError(f"the site endpoint answered {site_probe}, not 202")
        # The hello-world rate on a shared 2-core VM drifts by tens of percent from minute to minute, so
        # each round measures the baseline right before the two durable endpoints.
        for i in range(args.rounds):
            rounds["hello"].append(wrk(f"http://127.0.0.1:{hello_port}/", single, d, c, hello.pid))
            # Which server goes first rotates from round to round, against drift within a round.
            runs = servers[i % len(servers):] + servers[:i % len(servers)]
            for prefix, port, proc, script, sampler, db in runs:
                rounds[prefix + "single"].append(wrk(f"http://127.0.0.1:{port}/v1/events", script, d, c, proc.pid,
                                                     sampler, db))
            for prefix, port, proc, _, sampler, db in runs:
                rounds[prefix + "site"].append(wrk(f"http://127.0.0.1:{port}/api/service/event", site, d, c,
                                                   proc.pid, sampler, db))
        results.append(("hello-world POST (baseline)", median_run(rounds["hello"]), 1))
        results.append(("POST /v1/events (durable)", median_run(rounds["single"]), 1))
        results.append(("POST /api/service/event (durable)", median_run(rounds["site"]), 1))
        for prefix, rev in zip(prefixes[1:], args.ref, strict=True):
            results.append((f"POST /v1/events at {rev}", median_run(rounds[prefix + "single"]), 1))
            results.append((f"POST /api/service/event at {rev}", median_run(rounds[prefix + "site"]), 1))
        results.append(("POST /v1/events/batch x500", wrk(f"http://127.0.0.1:{tally_port}/v1/events/batch", batch,
                                                          d, c, tally.pid), 500))
        # Overload: a client sending far more than the database takes. The mailbox bound turns the excess
        # into 503s, so memory stays flat instead of growing with the backlog.
        tally.terminate()
        tally.wait(timeout=60)
        small = start([*serve, str(tally_port)], {**env, "TALLY_MAILBOX_EVENTS": "5000"}, tally_port, cwd=ROOT)
        procs.append(small)
        results.append(("overload: batch x500, 256 conns, mailbox 5k",
                        wrk(f"http://127.0.0.1:{tally_port}/v1/events/batch", batch, d, 256, small.pid), 500))
        copy_rate = asyncio.run(raw_copy(dsn, workspace_id, d, 500, 2))
        # For scale only: what the same COPY does without the events table's indexes and upkeep triggers.
        asyncio.run(_admin("CREATE TABLE bare_events (LIKE events INCLUDING DEFAULTS)", dsn))
        bare_rate = asyncio.run(raw_copy(dsn, workspace_id, d, 500, 2, "bare_events"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        for ref_dir, ref_name in zip(ref_dirs, ref_names, strict=True):
            asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{ref_name}" WITH (FORCE)'))
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref_dir)], capture_output=True)
        for made in (data_dir, *ref_datas, *(d.parent for d in ref_dirs)):
            shutil.rmtree(made, ignore_errors=True)

    print(f"\nwrk -t2 -c{args.connections} -d{args.duration}s on loopback, {os.cpu_count()} cores; "
          f"single-event and site bodies ~100 B, batch body 500 events; "
          f"state {'in Redis' if args.redis else 'in process'}\n")
    print("per round: hello-world req/s, then each durable endpoint's req/s and p99 ms, and its share of that round's "
          "hello-world rate")
    for i, h in enumerate(rounds["hello"]):
        line = f"  round {i + 1}: hello {h['rps']:7.0f}"
        for prefix, rev in zip(prefixes, ["", *args.ref], strict=True):
            for kind, label in (("single", "/v1/events"), ("site", "site")):
                r = rounds[prefix + kind][i]
                label = f"{rev} {label}" if rev else label
                line += f" | {label} {r['rps']:6.0f} p99 {r['p99']:6.1f} ({r['rps'] / h['rps']:.0%})"
        print(line)
    # Where each request's CPU goes, whole machine: when a server's event loop runs ~1 s per second, its
    # rate is 1 / (loop µs per request), and the share of hello-world is about the two loops' ratio.
    print("\nCPU per request, µs, medians of the rounds: the server's event-loop thread, its other threads "
          "(chDB, worker threads), its database's PostgreSQL backends, wrk, and the whole machine (2 cores: "
          "the rest is other processes); and how busy the loop and the machine were")
    print(f"  {'':26} {'loop':>6} {'threads':>8} {'PG':>6} {'wrk':>6} {'machine':>8} {'loop busy':>10} "
          f"{'machine busy':>13}")
    rows = [("hello-world", rounds["hello"])] + [
        ((rev + " " if rev else "") + label, rounds[prefix + kind])
        for prefix, rev in zip(prefixes, ["", *args.ref], strict=True)
        for kind, label in (("single", "/v1/events"), ("site", "site"))]
    for label, runs_ in rows:
        m = {f: _median([r[f] for r in runs_]) for f in ("loop_us", "server_us", "pg_us", "wrk_us", "machine_us",
                                                        "loop_busy", "machine_busy")}
        print(f"  {label:26} {m['loop_us']:6.0f} {m['server_us'] - m['loop_us']:8.0f} {m['pg_us']:6.0f} "
              f"{m['wrk_us']:6.0f} {m['machine_us']:8.0f} {m['loop_busy']:10.0%} {m['machine_busy']:13.0%}")
    median_share = {k: _median([r["rps"] / h["rps"] for r, h in zip(rounds[k], rounds["hello"], strict=True)])
                    for k in rounds if k != "hello" and rounds[k]}
    print(f"\nmedians of {args.rounds} rounds for the per-request rows; 'vs baseline' is the median per-round share\n")
    print(f"{'target':44} {'req/s':>9} {'events/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8} "
          f"{'peak RSS MB':>11} {'private MB':>10} {'vs baseline':>12}")
    for label, r, per in results:
        events = r["rps"] * per * (r["requests"] - r["non2xx"]) / max(r["requests"], 1)  # acknowledged only
        if label.startswith("hello"):
            versus = "100% req"
        elif per == 1:
            rev = label.rpartition(" at ")[2] if " at " in label else ""
            key = (prefixes[args.ref.index(rev) + 1] if rev else "") + ("single" if "/v1/" in label else "site")
            versus = f"{median_share[key]:.0%} req"
        else:
            versus = f"{events / copy_rate:.0%} COPY"
        print(f"{label:44} {r['rps']:9.0f} {events:10.0f} {r['p50']:8.2f} {r['p99']:8.2f} {r['non2xx']:8d} "
              f"{r['rss_mb']:11.0f} {r['private_mb']:10.0f} {versus:>12}")
    print(f"{'raw copy_records_to_table x500 (2 conns)':44} {'':>9} {copy_rate:10.0f}")
    print(f"{'  same into a bare table (for scale)':44} {'':>9} {bare_rate:10.0f}")
    if lag.samples:
        ordered = sorted(lag.samples)
        print(f"\nanalytics mirror lag during Tally's per-request rounds ({len(ordered)} /readyz samples): "
              f"p50 {_median(ordered):.2f} s, p99 {ordered[int(len(ordered) * 0.99)]:.2f} s, max {ordered[-1]:.2f} s")


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def _admin(sql: str, dsn: str = ADMIN) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
