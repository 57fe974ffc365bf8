"""Request bodies of POST /v1/data-sources: the envelope, then credentials and options per type."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, ClassVar, Literal

import msgspec
import yarl
from msgspec import Meta

from app.bodies import field_error, field_of, not_blank
from app.input_rules import HOST_NAME, MAX_DEPTH, decode_json, problem
from app.responses import invalid

SOURCE_TYPES = ("postgres", "mysql", "bigquery", "snowflake", "redshift", "stripe", "salesforce", "hubspot",
                "segment")
SQL_TYPES = ("postgres", "mysql", "redshift")
# Types that import rows of a table (or object) or a query, by the shared options model.
TABLE_TYPES = (*SQL_TYPES, "bigquery", "snowflake", "salesforce")

Text = Annotated[str, Meta(min_length=1, max_length=1024)]
Port = Annotated[int, Meta(ge=1, le=65535)]
# A column or table name, optionally schema-qualified; it is quoted before use in the peer's SQL.
Ident = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?\Z")]
Column = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_$]{0,62}\Z")]
EventName = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[a-z][a-z0-9_]*\Z")]  # \Z: app/schemas.py
PropertyName = Annotated[str, Meta(min_length=1, max_length=128)]
Url = Annotated[str, Meta(max_length=2048, pattern=r"^https?://[^\s/?#@]+(/[^\s]*)?\Z")]  # no user:password@


def _check_host(value: str, field: str) -> None:
    """A database host is a name or an IP address: a URL or DSN there (credentials and all) named no host,
    and was echoed in the source's status_reason."""
    try:
        ipaddress.ip_address(value)
        return
    except ValueError:
        pass
    try:
        name = value.encode("idna").decode()  # an internationalised name, as the resolver will send it
    except UnicodeError:
        name = ""
    if not HOST_NAME.match(name):
        raise field_error(field, "must be a host name or an IP address, without scheme, user, port or path "
                    "(the port has its own field)")


def _check_url(value: str | None, field: str) -> None:
    """A URL the pattern let through must also name a host and port the HTTP clients can use: `http://[::1`,
    `http://h:99999` or `http://h:0` would fail every sync with an unclear reason."""
    if value is None:
        return
    try:
        url = yarl.URL(value)
        port = url.explicit_port
    except ValueError as exc:  # UnicodeError (an IDNA label) is one
        raise field_error(field, f"not a usable URL ({exc})") from None
    if not url.host:
        raise field_error(field, "not a usable URL (no host)")
    if port is not None and not 1 <= port <= 65535:
        raise field_error(field, f"not a usable URL (port {port} is out of range 1-65535)")


class Schedule(msgspec.Struct, forbid_unknown_fields=True):
    frequency: Literal["hourly", "daily", "weekly"] = "daily"
    time: Annotated[str, Meta(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]\Z")] = "00:00"


class CreateIn(msgspec.Struct):
    # Kept as sent, spaces around included, as dashboards' and reports' names are.
    name: Annotated[str, Meta(min_length=1, max_length=200)]
    type: Literal[SOURCE_TYPES]  # type: ignore[valid-type]
    credentials: msgspec.Raw
    options: msgspec.Raw = msgspec.Raw(b"{}")
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        not_blank("name", self.name)


class Secret(msgspec.Struct, forbid_unknown_fields=True):
    """Credentials never print their values, whatever formats them."""

    secret_fields: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(<redacted>)"

    def values(self) -> list[str]:
        """The secret strings inside (passwords, keys, tokens), for scrubbing peer error messages."""
        found: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, str) and value:
                found.append(value)
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item)

        for field in self.secret_fields:
            walk(getattr(self, field))
        return found


class SqlCredentials(Secret):
    secret_fields: ClassVar[tuple[str, ...]] = ("password",)
    host: Text
    database: Text
    username: Text
    password: Annotated[str, Meta(max_length=1024)]  # may be empty: some servers allow password-less users
    port: Port | None = None

    def __post_init__(self) -> None:
        _check_host(self.host, "host")


class BigQueryCredentials(Secret):
    secret_fields: ClassVar[tuple[str, ...]] = ("service_account_key",)
    project_id: Text
    dataset: Text
    service_account_key: dict[str, Any]

    def __post_init__(self) -> None:
        for needed in ("client_email", "private_key"):
            if not isinstance(self.service_account_key.get(needed), str):
                raise field_error("service_account_key", f"the service account key JSON lacks `{needed}`")

    def values(self) -> list[str]:
        # Only the key material is secret; the key file's other fields (project, e-mail, token URI) are
        # identifiers that a clear status_reason may need to name.
        key = self.service_account_key
        return [v for v in (key.get("private_key"), key.get("private_key_id")) if isinstance(v, str) and v]


class SnowflakeCredentials(Secret):
    secret_fields: ClassVar[tuple[str, ...]] = ("password",)
    # An account identifier (`xy12345.eu-west-1`, `myorg-myaccount`): it becomes the first labels of the
    # host name, so nothing that could end or redirect a URL's authority (`/`, `?`, `#`, `@`, `:`).
    account: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}\Z")]
    warehouse: Text
    database: Text
    username: Text
    password: Text


class StripeCredentials(Secret):
    secret_fields: ClassVar[tuple[str, ...]] = ("api_key",)
    api_key: Annotated[str, Meta(pattern=r"^(sk|rk)_(live|test)_[A-Za-z0-9]{4,}\Z")]


class OAuthCredentials(Secret):
    """An access token, or an OAuth app's client id/secret with a refresh token."""

    secret_fields: ClassVar[tuple[str, ...]] = ("access_token", "client_secret", "refresh_token")

    access_token: Text | None = None
    client_id: Text | None = None
    client_secret: Text | None = None
    refresh_token: Text | None = None

    def __post_init__(self) -> None:
        if self.access_token is not None:
            return
        for needed in ("client_id", "client_secret", "refresh_token"):
            if getattr(self, needed) is None:
                raise field_error(needed if self.client_id else "access_token",
                            "give access_token, or client_id, client_secret and refresh_token")


class SalesforceCredentials(OAuthCredentials):
    """An access token with the org's instance_url, or a connected app's client id/secret with a refresh
    token (the token answer names the instance)."""

    instance_url: Url | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_url(self.instance_url, "instance_url")
        if self.access_token is not None and self.instance_url is None:
            raise field_error("instance_url", "an access_token needs the org's instance_url")


class SegmentCredentials(Secret):
    """A Segment source receives calls from Segment's SDKs: its write key (the user's existing one, so SDK
    configurations keep working, or generated at creation) is stored as a SHA-256 only."""

    secret_fields: ClassVar[tuple[str, ...]] = ("write_key",)
    # Printable ASCII without ':' (it is the HTTP Basic user name) or spaces.
    write_key: Annotated[str, Meta(min_length=8, max_length=200, pattern=r"^[!-9;-~]+\Z")] | None = None


CREDENTIALS: dict[str, type[msgspec.Struct]] = {
    "postgres": SqlCredentials, "mysql": SqlCredentials, "redshift": SqlCredentials,
    "bigquery": BigQueryCredentials, "snowflake": SnowflakeCredentials, "stripe": StripeCredentials,
    "salesforce": SalesforceCredentials, "hubspot": OAuthCredentials, "segment": SegmentCredentials,
}


class Options(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What to import and how rows map to events; all optional."""

    table: Ident | None = None
    query: Annotated[str, Meta(min_length=1, max_length=20_000)] | None = None
    cursor_column: Column | None = None
    timestamp_column: Column | None = None
    event_column: Column | None = None
    event_name: EventName | None = None
    user_id_column: Column | None = None
    # property name -> column: when given, only these columns become event properties, under these names.
    properties: dict[PropertyName, Column] | None = None
    base_url: Url | None = None
    # Re-read rows whose cursor is this much before the last one imported (skipping those imported): rows
    # committed after a sync with an older cursor value (a transaction's now(), a serial taken early).
    lookback_seconds: Annotated[int, Meta(ge=0, le=7 * 86_400)] | None = None

    def __post_init__(self) -> None:
        _check_url(self.base_url, "base_url")
        if self.table is not None and self.query is not None:
            raise field_error("query", "give either table or query, not both")
        if self.event_column is not None and self.event_name is not None:
            raise field_error("event_name", "give either event_column or event_name, not both")
        if self.lookback_seconds and self.cursor_column is None:
            raise field_error("lookback_seconds", "needs cursor_column")


def _decode_part(raw: bytes, schema: type, prefix: str) -> Any:
    try:
        value = decode_json(raw, type=schema)
    except msgspec.ValidationError as exc:
        field, message = field_of(exc)
        if not field:
            # Root-level messages name the field themselves, e.g. "Object missing required field `host`".
            found = re.search(r"field `([^`]+)`", message)
            field = found.group(1) if found else ""
        name = f"{prefix}.{field}" if field else prefix
        raise invalid(f"{name}: {message}", fields=[{"field": name, "message": message}]) from None
    except msgspec.DecodeError:  # the part is JSON (the body decoded), but may hold bytes that are not UTF-8
        raise invalid(f"{prefix}: not valid JSON", fields=[{"field": prefix, "message": "not valid JSON"}]) from None
    # The body's own check (app/bodies.py) does not look inside these raw parts: options are stored as jsonb,
    # which cannot hold U+0000 (a 500 before), and no peer takes it in a credential either.
    found = problem(bytes(raw), value)
    if found is not None:
        field, kind = found
        name = f"{prefix}.{field}" if field else prefix
        message = "contains U+0000" if kind == "nul" else f"nests deeper than {MAX_DEPTH} levels"
        raise invalid(f"{name}: {message}", fields=[{"field": name, "message": message}])
    return value


def decode_parts(body: CreateIn) -> tuple[msgspec.Struct, Options]:
    """Validate credentials for the body's type and the options; 400 naming e.g. credentials.host."""
    credentials = _decode_part(body.credentials, CREDENTIALS[body.type], "credentials")
    options = _decode_part(body.options, Options, "options")
    if body.type not in TABLE_TYPES and (options.table or options.query or options.cursor_column):
        raise invalid("options: table, query and cursor_column apply to postgres, mysql, redshift, bigquery, "
                      "snowflake and salesforce only",
                      fields=[{"field": "options.table", "message": "not used by this type"}])
    return credentials, options
