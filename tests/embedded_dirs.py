"""A folder for an embedded PostgreSQL in tests, and what tests ask of its server."""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A folder the server's own unprivileged user can reach, outside pytest's temporary folders: those are
    root-only, and another pytest session starting closes them again (chmod 700) under a running test, so a
    server's start or restart in one failed with "Permission denied". A server a failed test left running is
    stopped."""
    path = Path(tempfile.mkdtemp(prefix="tally-embedded-"))
    path.chmod(0o755)
    yield path
    postmaster = postmaster_of(path)
    if postmaster is not None and alive(postmaster):
        postmaster.send_signal(signal.SIGINT)  # fast shutdown
        psutil.wait_procs([postmaster], timeout=30)
    shutil.rmtree(path, ignore_errors=True)


def postmaster_of(data_dir: Path) -> psutil.Process | None:
    """The running server of `data_dir`, if any."""
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    try:
        return psutil.Process(int(pid_file.read_text().split()[0]))
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
        return None


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE  # exited, not yet reaped
    except psutil.NoSuchProcess:
        return False
