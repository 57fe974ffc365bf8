"""TALLY_ANALYTICS_URL's scheme decides how the store's client speaks to the ClickHouse server: an `https://`
URL must open TLS whatever its port, an `http://` one must not. A listener that records the first bytes a
connection sends tells which (no ClickHouse answers; opening the store then fails, as it should)."""

from __future__ import annotations

import socket
import threading

import pytest

from storage.clickhouse import open_store

TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello


def first_bytes_sent(url_of_port) -> bytes:
    """Open the store at url_of_port(port) against a listener that closes every connection after reading
    its first bytes; the first connection's bytes."""
    seen: list[bytes] = []
    done = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.1)

        def accept() -> None:
            while not done.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.settimeout(5)
                    seen.append(conn.recv(16))

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        with pytest.raises(Exception):  # noqa: B017 - nothing answers as ClickHouse; the bytes are the point
            open_store(url=url_of_port(listener.getsockname()[1]), path=None, database="tally")
        done.set()
        thread.join()
    assert seen, "the store's client never connected"
    return seen[0]


@pytest.mark.parametrize("port_text", [":{port}", ":{port}/tally"])
def test_an_https_url_opens_tls_on_any_port(port_text):
    sent = first_bytes_sent(lambda port: f"https://default:pw@127.0.0.1{port_text.format(port=port)}")
    assert sent[0] == TLS_HANDSHAKE, sent


def test_an_http_url_speaks_plain_http():
    sent = first_bytes_sent(lambda port: f"http://127.0.0.1:{port}")
    assert sent.split(b" ", 1)[0] in (b"GET", b"POST"), sent
