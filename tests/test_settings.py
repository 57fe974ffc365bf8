"""Settings: each declared once (type, default, variable), every variable documented in the README."""

import dataclasses
from pathlib import Path

import pytest

from app.settings import ConfigError, Settings

README = (Path(__file__).parent.parent / "README.md").read_text()


def _variables() -> dict[str, str]:
    return {f.name: f.metadata["setting"]["env"] for f in dataclasses.fields(Settings)}


def test_every_setting_has_a_variable_in_the_readme_table():
    table = [line for line in README.splitlines() if line.startswith("| `")]
    for name, variable in _variables().items():
        assert any(f"`{variable}`" in line for line in table), f"{name} ({variable}) is not in the README table"


def test_from_env_with_nothing_set_is_the_declared_defaults(monkeypatch, tmp_path):
    for variable in _variables().values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    settings = Settings.from_env()
    assert dataclasses.replace(settings, secret="", data_dir=Path(".tally-data")) == Settings()
    assert settings.secret == (tmp_path / "secret").read_text()


def test_from_env_parses_types_and_floors(monkeypatch, tmp_path):
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TALLY_BATCH_LINGER_US", "1500")
    monkeypatch.setenv("TALLY_FLUSHES_IN_FLIGHT", "0")
    monkeypatch.setenv("TALLY_TRUSTED_PROXIES", " 10.0.0.0/8 , ,127.0.0.1")
    monkeypatch.setenv("TALLY_ACCESS_LOG", "no")
    monkeypatch.setenv("TALLY_SOURCE_TIMEOUT_SECONDS", "2.5")
    settings = Settings.from_env()
    assert settings.batch_linger_ms == 1.5
    assert settings.flushes_in_flight == 1
    assert settings.trusted_proxies == ("10.0.0.0/8", "127.0.0.1")
    assert settings.access_log is False
    assert settings.source_timeout_seconds == 2.5
    monkeypatch.setenv("TALLY_BATCH_MAX", "lots")
    with pytest.raises(ConfigError, match="TALLY_BATCH_MAX must be an integer"):
        Settings.from_env()


def test_production_requires_a_secret(monkeypatch, tmp_path):
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TALLY_ENV", "production")
    monkeypatch.delenv("TALLY_SECRET", raising=False)
    with pytest.raises(ConfigError, match="TALLY_SECRET is required"):
        Settings.from_env()
    monkeypatch.setenv("TALLY_ENV", "staging")
    with pytest.raises(ConfigError, match="TALLY_ENV must be"):
        Settings.from_env()


@pytest.mark.parametrize(("variable", "raw", "message"), [
    ("PORT", "99999", "PORT must be between 1 and 65535, got '99999'"),
    ("PORT", "0", "PORT must be between 1 and 65535, got '0'"),
    ("TALLY_BATCH_MAX", "0", "TALLY_BATCH_MAX must be at least 1, got '0'"),
    ("TALLY_BATCH_MAX", "-1", "TALLY_BATCH_MAX must be at least 1, got '-1'"),
    ("TALLY_MAILBOX_EVENTS", "0", "TALLY_MAILBOX_EVENTS must be at least 1, got '0'"),
    ("TALLY_DB_POOL_MAX", "0", "TALLY_DB_POOL_MAX must be at least 1, got '0'"),
    ("TALLY_BATCH_LINGER_US", "-5", "TALLY_BATCH_LINGER_US must be at least 0, got '-5'"),
    ("TALLY_IP_EVENTS_PER_MIN", "-1", "TALLY_IP_EVENTS_PER_MIN must be at least 0, got '-1'"),
    ("TALLY_SITE_EVENTS_PER_MIN", "-1", "TALLY_SITE_EVENTS_PER_MIN must be at least 0, got '-1'"),
    ("TALLY_REPORT_TIMEOUT_SECONDS", "0", "TALLY_REPORT_TIMEOUT_SECONDS must be greater than 0, got '0'"),
    ("TALLY_EXPORT_WRITE_TIMEOUT_SECONDS", "-1",
     "TALLY_EXPORT_WRITE_TIMEOUT_SECONDS must be greater than 0, got '-1'"),
    ("TALLY_REPORT_TIMEOUT_SECONDS", "nan", "TALLY_REPORT_TIMEOUT_SECONDS must be a finite number, got 'nan'"),
])
def test_counts_ports_and_timeouts_out_of_range_are_refused(monkeypatch, tmp_path, variable, raw, message):
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv(variable, raw)
    with pytest.raises(ConfigError) as refused:
        Settings.from_env()
    assert str(refused.value) == message


def test_the_edges_of_the_ranges_are_accepted(monkeypatch, tmp_path):
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    for variable, raw in (("PORT", "65535"), ("TALLY_BATCH_MAX", "1"), ("TALLY_MAILBOX_EVENTS", "1"),
                          ("TALLY_DB_POOL_MAX", "1"), ("TALLY_IP_EVENTS_PER_MIN", "0")):
        monkeypatch.setenv(variable, raw)
    settings = Settings.from_env()
    assert (settings.port, settings.batch_max, settings.mailbox_events, settings.pool_max,
            settings.ip_events_per_min) == (65535, 1, 1, 1, 0)


@pytest.mark.parametrize(("variable", "raw", "message"), [
    # redis-py raised a ValueError from deep in start-up (a traceback), and read a database that is not a
    # number as database 0, another tenant's perhaps.
    ("REDIS_URL", "localhost:6379", "REDIS_URL must be a redis://, rediss:// or unix:// URL"),
    ("REDIS_URL", "redis://127.0.0.1:6379/cache", "REDIS_URL names database 'cache': a database is a number"),
    ("REDIS_URL", "redis://127.0.0.1:6379/0?db=x", "REDIS_URL names database 'x': a database is a number"),
    ("REDIS_URL", "redis://127.0.0.1:port/0", "REDIS_URL is not a valid URL (its port?)"),
    # Any word but 0/false/no meant "on": TALLY_ACCESS_LOG=off kept the access log.
    ("TALLY_ACCESS_LOG", "off", None),
    ("TALLY_ACCESS_LOG", "disabled", "TALLY_ACCESS_LOG must be 1 or 0 (true/false, yes/no, on/off), got 'disabled'"),
    ("TALLY_RUN_SCHEDULER", "nein", "TALLY_RUN_SCHEDULER must be 1 or 0 (true/false, yes/no, on/off), got 'nein'"),
    # An entry that is not an address or network was skipped on every request: the proxy was not trusted, so
    # every visitor behind it had the proxy's address (one IP rate limit for all of them).
    ("TALLY_TRUSTED_PROXIES", "10.0.0.1,10.0.0/8",
     "TALLY_TRUSTED_PROXIES: '10.0.0/8' is not an IP address or network (CIDR)"),
    # An entry that was neither a network nor a host name was kept as a host name no host has: the warehouse it
    # meant stayed refused, with a message pointing at this very setting.
    ("TALLY_SOURCES_ALLOW_HOSTS", "warehouse.internal,10.0.0/8",
     "TALLY_SOURCES_ALLOW_HOSTS: '10.0.0/8' is neither a network (CIDR), an IP address nor a host name"),
    ("TALLY_SOURCES_ALLOW_HOSTS", "https://warehouse.internal",
     "TALLY_SOURCES_ALLOW_HOSTS: 'https://warehouse.internal' is neither a network (CIDR), an IP address nor a "
     "host name"),
    # A name the store refuses was a ValueError traceback from the analytics start-up.
    ("TALLY_ANALYTICS_DATABASE", "my-db",
     "TALLY_ANALYTICS_DATABASE must be a ClickHouse name (letters, digits and _, not starting with a digit), "
     "got 'my-db'"),
    ("TALLY_ANALYTICS_CLUSTER", "prod cluster",
     "TALLY_ANALYTICS_CLUSTER must be a ClickHouse name (letters, digits and _, not starting with a digit), "
     "got 'prod cluster'"),
    # A URL without a scheme sent report emails to localhost:25, and a resolver URL was only tried on a verify.
    ("TALLY_SMTP_URL", "mail.example.com:587",
     "TALLY_SMTP_URL must be a URL with a scheme and a host, e.g. smtp://user:password@mail.example.com:587"),
    ("TALLY_SMTP_URL", "http://mail.example.com", "TALLY_SMTP_URL must start with smtp:// or smtps://"),
    ("TALLY_DOH_URL", "cloudflare-dns.com/dns-query",
     "TALLY_DOH_URL must be a URL with a scheme and a host, e.g. https://cloudflare-dns.com/dns-query"),
])
def test_values_that_could_not_work_are_refused_naming_the_variable(monkeypatch, tmp_path, variable, raw, message):
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv(variable, raw)
    if message is None:  # accepted, and meaning what it says
        assert Settings.from_env().access_log is False
        return
    with pytest.raises(ConfigError) as refused:
        Settings.from_env()
    assert str(refused.value) == message


def test_the_forms_of_each_checked_setting_that_work_are_accepted(monkeypatch, tmp_path):
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    accepted = {"REDIS_URL": "rediss://:pw@cache.internal:6380/3", "TALLY_ACCESS_LOG": "ON",
                "TALLY_RUN_SCHEDULER": "false", "TALLY_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7,fd00::/8",
                "TALLY_SOURCES_ALLOW_HOSTS": "10.1.0.0/16,dwh-01.corp.example.,fd00::1",
                "TALLY_ANALYTICS_DATABASE": "tally_2", "TALLY_ANALYTICS_CLUSTER": "main",
                "TALLY_ANALYTICS_URL": "https://ch.internal:8443",
                "TALLY_SMTP_URL": "smtps://u:p@mail.example.com", "TALLY_DOH_URL": "https://dns.google/resolve"}
    for variable, raw in accepted.items():
        monkeypatch.setenv(variable, raw)
    settings = Settings.from_env()
    assert settings.sources_allow_hosts == ("10.1.0.0/16", "dwh-01.corp.example.", "fd00::1")
    assert (settings.redis_url, settings.access_log, settings.run_scheduler, settings.trusted_proxies,
            settings.analytics_database, settings.smtp_url) == (
        accepted["REDIS_URL"], True, False, ("10.0.0.0/8", "192.168.1.7", "fd00::/8"), "tally_2",
        accepted["TALLY_SMTP_URL"])
    for variable, raw in (("REDIS_URL", "unix:///run/redis.sock?db=2"), ("REDIS_URL", "redis://localhost")):
        monkeypatch.setenv(variable, raw)
        assert Settings.from_env().redis_url == raw


def test_a_cluster_without_a_server_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("TALLY_ANALYTICS_URL", raising=False)
    monkeypatch.setenv("TALLY_ANALYTICS_CLUSTER", "analytics")
    with pytest.raises(ConfigError, match="TALLY_ANALYTICS_CLUSTER needs TALLY_ANALYTICS_URL"):
        Settings.from_env()
    monkeypatch.setenv("TALLY_ANALYTICS_URL", "http://ch.internal:8123")
    assert Settings.from_env().analytics_cluster == "analytics"
