"""Credential values are hidden in data-source error texts without mangling the rest of the text."""

from app.sources.base import redact

MESSAGE = "importing from Segment is not supported yet; the connection check passed"


def test_a_short_secret_is_hidden_only_as_a_whole_token():
    # A one-letter password used to turn this into "im***orting ... su***orted".
    assert redact(MESSAGE, ["p", "s"]) == MESSAGE
    assert redact("login failed for user p at db:5432", ["p"]) == "login failed for user *** at db:5432"
    assert redact("postgres://ro:abc@db/app refused", ["abc"]) == "postgres://ro:***@db/app refused"


def test_a_long_secret_is_hidden_wherever_it_appears():
    secret = "s3cr3t-passw0rd"
    assert redact(f"auth failed: token=x{secret}y; {secret}", [secret]) == "auth failed: token=x***y; ***"


def test_longer_secrets_first_and_empty_ones_ignored():
    assert redact("key hunter2hunter2 and hunter2", ["hunter2", "hunter2hunter2", ""]) == "key *** and ***"
