"""`make test` starts PostgreSQL, Redis and MariaDB when they are down (.ci/services), as CI does.

The servers of this machine are shared, so the script runs against stand-in commands that record
what they were asked to do and report "down" until started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STUBS = {
    # status checks: up only once the matching starter ran
    "pg_isready": '[ -e "$STATE/pg" ]',
    "redis-cli": '[ -e "$STATE/redis" ] && echo PONG',
    "mysqladmin": '[ -e "$STATE/mariadb" ]',
    # starters: record the call and come up
    "pg_ctlcluster": 'echo "pg_ctlcluster $*" >> "$STATE/calls"; touch "$STATE/pg"',
    "redis-server": 'echo "redis-server $*" >> "$STATE/calls"; touch "$STATE/redis"',
    "start-stop-daemon": 'echo "start-stop-daemon $*" >> "$STATE/calls"; touch "$STATE/mariadb"',
}


def _run(tmp_path: Path, *, up: tuple[str, ...] = (), stubs: dict[str, str] = STUBS) -> list[str]:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    mariadbd = bin_dir / "mariadbd"
    mariadbd.write_text("#!/bin/sh\n")
    mariadbd.chmod(0o755)
    (tmp_path / "pgconf" / "15").mkdir(parents=True)
    for service in up:
        (state / service).touch()
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "STATE": str(state),
           "PG_CONF_DIR": str(tmp_path / "pgconf"), "MARIADBD": str(mariadbd),
           "REDIS_DIR": str(tmp_path / "redis"), "REDIS_LOG_DIR": str(tmp_path / "redis-log")}
    done = subprocess.run([str(ROOT / ".ci" / "services")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = state / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_services_that_are_down_are_started(tmp_path):
    calls = _run(tmp_path)
    assert [c.split()[0] for c in calls] == ["pg_ctlcluster", "redis-server", "start-stop-daemon"]
    assert calls[0] == "pg_ctlcluster --skip-systemctl-redirect 15 main start"
    assert "--port 6379" in calls[1]


def test_redis_is_waited_for_like_the_others(tmp_path):
    # This Redis comes up a second after it was started: the script must not return before it answers.
    slow = {**STUBS, "redis-server": 'echo "redis-server $*" >> "$STATE/calls"; '
                                          '(sleep 1; touch "$STATE/redis") >/dev/null 2>&1 &'}
    _run(tmp_path, stubs=slow)
    assert (tmp_path / "state" / "redis").exists()


def test_services_that_are_up_are_left_alone(tmp_path):
    assert _run(tmp_path, up=("pg", "redis", "mariadb")) == []


def test_make_test_starts_the_services_before_the_suite():
    plan = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    lines = plan.splitlines()
    services = lines.index(".ci/services")
    assert services < next(i for i, line in enumerate(lines) if "pytest" in line)
    # CI runs the same path: .ci/run ends in `make test` and starts nothing itself.
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().endswith("make test") and "redis-server" not in ci
