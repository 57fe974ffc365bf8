"""The analytics mirror's inserts into the embedded store, in process: CPU per insert and per event, split by
thread (the calling thread, chDB's other threads, its background merges), over a run of inserts spaced like
the mirror's rounds, so that the merges they cause are counted too. No PostgreSQL: the rows are made here in
the CSV layout the mirror's COPY writes (storage.clickhouse_schema.INPUT_COLUMNS).

    .venv/bin/python bench/mirror_insert.py [--kind site] [--events 4000] [--inserts 20] [--gap 0.75] \
        [--sessions 1] [--repeat 2] [--variant as-is --variant direct ...]

`--sessions 1` is what bench/ingest.py's site load makes (one browser, one session); keyed rows go to 5,000
users. Each variant runs on a fresh scratch store, the variants alternating `--repeat` times. Variants:

- as-is: the store as it is (`events_in` and the views it feeds);
- direct: `INSERT INTO <kind>_events SELECT <the view's query> FROM file(...)`, bypassing `events_in`;
- no-session-view, no-day-view: without the view that feeds site_sessions / site_days (measurement only);
- no-entry-exit: site_sessions' view without its entry and exit pages (measurement only: the two min/max
  over tuples);
- no-other-kind-view: without the events_in view of the other kind (a keyed insert without the site view);
- no-merges: background merges stopped (what the inserts cost alone; parts pile up, keep --inserts small).
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage.clickhouse import open_store  # noqa: E402
from storage.clickhouse_schema import (  # noqa: E402
    CSV_INPUT_SETTINGS,
    ENTRY,
    ENTRY_NONE,
    EXIT,
    EXIT_NONE,
    INPUT_COLUMNS,
    KEYED_FROM_INPUT,
    SESSION_STATES,
    SITE_FROM_INPUT,
)

TICK = os.sysconf("SC_CLK_TCK")
STRUCTURE = ", ".join(f"{c} UInt64" if c == "workspace_id" else f"{c} DateTime64(6, \\'UTC\\')" if c == "ts"
                      else f"{c} String" for c in INPUT_COLUMNS)
TARGET_COLUMNS = {
    "keyed": "workspace_id, env, name, ts, id, user_id, actor, properties",
    "site": "site_id, ts, id, name, session, visitor, page, referrer, referrer_host, country, browser, "
            "browser_version, os, os_version, device, utm_source, utm_medium, utm_campaign, utm_term, utm_content, "
            "source, channel, region, city, properties",
}


def rows(kind: str, n: int, sessions: int) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    now = time.time()
    for _ in range(n):
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now)) + f".{random.randrange(10**6):06d}"
        if kind == "keyed":
            row = {"id": f"evt_{uuid.uuid4().hex}", "workspace_id": 1, "env": "live", "name": "page_viewed", "ts": ts,
                   "user_id": f"u{random.randrange(5000)}", "properties": '{"path": "/pricing", "plan": "pro"}'}
        else:
            s = random.randrange(sessions)
            row = {"id": f"evt_{uuid.uuid4().hex}", "workspace_id": 1, "env": "live", "site_id": "bench-site",
                   "name": "pageview", "ts": ts, "session_id": f"ses_{s}", "ip_hash": f"v{s}", "path": "/pricing",
                   "referrer": "https://news.example/", "country": "DE", "browser": "Chrome",
                   "browser_version": "131", "os": "Windows", "os_version": "10", "device": "desktop",
                   "source": "news.example", "channel": "Referral", "properties": "{}"}
        writer.writerow([row.get(c, "") for c in INPUT_COLUMNS])
    return out.getvalue().encode()


def thread_cpu() -> dict[int, tuple[str, float]]:
    found = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return found


def run(variant: str, kind: str, batches: list[bytes], gap: float) -> dict[str, float]:
    store_dir = Path(tempfile.mkdtemp(prefix="tally-bench-insert-"))
    store = open_store(url=None, path=store_dir, database="tally")
    db = store.database
    if variant == "no-session-view":
        store.command_sync(f"DROP VIEW {db}.site_sessions_mv")
    elif variant == "no-day-view":
        store.command_sync(f"DROP VIEW {db}.site_days_mv")
    elif variant == "no-entry-exit":
        states = SESSION_STATES.replace(f"min({ENTRY}) AS entry, max({EXIT}) AS exit",
                                        f"{ENTRY_NONE} AS entry, {EXIT_NONE} AS exit")
        store.command_sync(f"DROP VIEW {db}.site_sessions_mv")
        store.command_sync(f"CREATE MATERIALIZED VIEW {db}.site_sessions_mv TO {db}.site_sessions AS "
                           + states.format(source=f"{db}.site_events"))
    elif variant == "no-other-kind-view":  # what the other kind's view costs an insert that has none of it
        store.command_sync(f"DROP VIEW {db}.{'site' if kind == 'keyed' else 'keyed'}_events_in_mv")
    elif variant == "no-merges":
        store.command_sync("SYSTEM STOP MERGES")

    def insert(data: bytes) -> None:
        if variant != "direct":
            store.insert_events_csv_sync(data)
            return
        with tempfile.NamedTemporaryFile(suffix=".csv") as f:
            f.write(data)
            f.flush()
            select = (KEYED_FROM_INPUT if kind == "keyed" else SITE_FROM_INPUT).format(
                source=f"file('{f.name}', 'CSV', '{STRUCTURE}')")
            store.command_sync(f"INSERT INTO {db}.{kind}_events ({TARGET_COLUMNS[kind]}) {select}",
                               settings={**CSV_INPUT_SETTINGS, "max_threads": 1})

    insert(batches[0])  # the first insert creates the partition's first parts
    time.sleep(1)
    me = threading.get_native_id()
    before, started = thread_cpu(), time.process_time()
    for data in batches:
        insert(data)
        time.sleep(gap)
    time.sleep(gap)  # merges the last inserts set off
    total = time.process_time() - started
    after = thread_cpu()
    store.close()
    shutil.rmtree(store_dir, ignore_errors=True)
    spent = collections.Counter()
    for tid, (name, cpu) in after.items():
        delta = cpu - before.get(tid, (name, 0.0))[1]
        group = "caller" if tid == me else "merges" if name.startswith("MergeMutate") else "other threads"
        spent[group] += delta
    return {"total": total, **spent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=("keyed", "site"), default="site")
    parser.add_argument("--events", type=int, default=4000, help="events per insert (a mirror round's batch)")
    parser.add_argument("--inserts", type=int, default=20)
    parser.add_argument("--gap", type=float, default=0.75, help="seconds between inserts (the mirror's period)")
    parser.add_argument("--sessions", type=int, default=1, help="site events: sessions the events spread over")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args()
    variants = args.variant or ["as-is"]
    batches = [rows(args.kind, args.events, args.sessions) for _ in range(args.inserts)]
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.repeat):
        for variant in variants:
            results[variant].append(run(variant, args.kind, batches, args.gap))
    print(f"\n{args.inserts} inserts of {args.events:,} {args.kind} events, {args.gap} s apart"
          + (f", {args.sessions} session(s)" if args.kind == "site" else "")
          + "; process CPU per insert, ms (each run), and its split by thread (medians)\n")
    print(f"{'variant':18} {'per insert ms':>26} {'µs/event':>9} {'caller':>8} {'other':>8} {'merges':>8}")
    for variant, runs in results.items():
        per = [r["total"] / args.inserts * 1e3 for r in runs]
        med = sorted(runs, key=lambda r: r["total"])[len(runs) // 2]
        split = [med.get(g, 0.0) / args.inserts * 1e3 for g in ("caller", "other threads", "merges")]
        per_event = sorted(per)[len(per) // 2] / args.events * 1e3
        print(f"{variant:18} {', '.join(f'{p:.1f}' for p in per):>26} {per_event:9.2f} "
              + " ".join(f"{s:8.1f}" for s in split))


if __name__ == "__main__":
    main()
