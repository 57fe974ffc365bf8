"""Run `python -m app serve` as a real process for tests that need signals or a fresh data folder."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(env: dict[str, str], timeout: float = 60) -> tuple[subprocess.Popen, str]:
    port = free_port()
    own_dir = None
    if "TALLY_DATA_DIR" not in env:
        # A data folder of its own, removed by stop(): the default (./.tally-data) would be the checkout's,
        # shared by every run, and its analytics store is tied to the first run's database.
        own_dir = tempfile.mkdtemp(prefix="tally-test-data-")
        env = {**env, "TALLY_DATA_DIR": own_dir}
    if "TMPDIR" not in env:
        # Temporary files (the analytics store spools each insert to one) go with the test's data: a server
        # killed mid-insert leaves its file there, not in /tmp.
        tmp = os.path.join(env["TALLY_DATA_DIR"], "tmp")
        os.makedirs(tmp, exist_ok=True)
        env = {**env, "TMPDIR": tmp}
    # Logs go to a file: a pipe nobody reads would fill up and stall the server mid-test.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
    )
    proc.log = log  # type: ignore[attr-defined]
    proc.own_dir = own_dir  # type: ignore[attr-defined]
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early: {output(proc)[-2000:]}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=1) as resp:
                if resp.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not become ready")


def output(proc: subprocess.Popen) -> str:
    proc.log.seek(0)  # type: ignore[attr-defined]
    return proc.log.read().decode(errors="replace")  # type: ignore[attr-defined]


def stop(proc: subprocess.Popen, timeout: float = 60) -> str:
    proc.terminate()
    proc.wait(timeout=timeout)
    if proc.own_dir is not None:  # type: ignore[attr-defined]
        shutil.rmtree(proc.own_dir, ignore_errors=True)  # type: ignore[attr-defined]
    return output(proc)
