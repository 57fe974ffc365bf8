"""Deletes in the embedded analytics store: an erasure's (or an alias's) lightweight DELETE on keyed_events,
under chDB's own background settings against the store's (storage.clickhouse.ENGINE_CONFIG), one run.

    .venv/bin/python bench/deletes.py [--parts 4,16,48] [--runs 3] [--users 10]

A DELETE is a mutation of every part of the table, whatever it matches. For each part count, a store with
one partition (month) per part and 1,000 events in each is built in a child process per configuration
(chDB opens one engine per process, with one configuration), and then timed: one user's erasure (median
of `--runs`), and `--users` users' erasures one DELETE each (as a mirror round made them before) against
one DELETE for all of them (as it makes them now). Prints a table of milliseconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage import clickhouse
from storage.analytics_mirror import _ERASED_ROWS

CONFIGS = {"chDB's own": "<clickhouse/>\n", "Tally's (ENGINE_CONFIG)": clickhouse.ENGINE_CONFIG}


def erasure(users: list[str]) -> dict:
    return {"users": [(1, "live", u) for u in users], "actors": [(1, "live", f"anon:{u}") for u in users]}


def child(config: str, parts: int, runs: int, users: int) -> dict[str, float]:
    """Runs in a child process: build the store, time the deletes (ms)."""
    clickhouse.ENGINE_CONFIG = config
    path = Path(tempfile.mkdtemp(prefix="tally-bench-deletes-"))
    store = clickhouse.open_store(url=None, path=path, database="bench")
    table = store.table("keyed_events")
    for month in range(parts):  # one insert per month: one part per partition
        store.client.command(
            f"INSERT INTO {table} (workspace_id, env, name, ts, id, user_id) SELECT 1, 'live', 'seen', "
            f"addMonths(toDateTime64('2020-01-01', 6, 'UTC'), {month}) + number, "
            f"concat('evt_{month}_', toString(number)), concat('u', toString(number % 500)) FROM numbers(1000)")

    def delete(params: dict) -> float:
        t = time.perf_counter()
        store.client.command(f"DELETE FROM {table} WHERE {_ERASED_ROWS}", parameters=params,
                             settings={"lightweight_deletes_sync": 2})
        return (time.perf_counter() - t) * 1000

    one = statistics.median(delete(erasure([f"u{i}"])) for i in range(runs))
    each = sum(delete(erasure([f"u{100 + i}"])) for i in range(users))
    together = delete(erasure([f"u{200 + i}" for i in range(users)]))
    store.close()
    shutil.rmtree(path)
    return {"one": one, "each": each, "together": together}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="4,16,48")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, parts = json.loads(args.child)
        print(json.dumps(child(CONFIGS[name], parts, args.runs, args.users)))
        return
    print(f"| parts | configuration | one erasure, median of {args.runs} | {args.users} erasures, a DELETE each "
          f"| {args.users} erasures, one DELETE |")
    print("|---:|---|---:|---:|---:|")
    for parts in (int(p) for p in args.parts.split(",")):
        for name in CONFIGS:  # each in its own process
            out = subprocess.run([sys.executable, __file__, "--runs", str(args.runs), "--users", str(args.users),
                                  "--child", json.dumps([name, parts])], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {parts} | {name} | {r['one']:.0f} | {r['each']:.0f} | {r['together']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
