"""The `tally` command line, as other tools call it."""

import os
import subprocess
import sys

import pytest

from tests.conftest import bearer


def tally(database_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def cli(database_url, client):  # client: the schema exists
    return lambda *args: tally(database_url, *args)


async def test_create_key_prints_the_key_alone_and_it_works(cli, client, workspace):
    done = cli("create-key", "--workspace", workspace, "--scopes", "read,write", "--name", "ci")
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    assert done.stdout == key + "\n" and key.startswith("tally_live_sk_")
    assert (await client.get("/v1/events", headers=bearer(key))).status == 200
    test_key = cli("create-key", "--workspace", workspace, "--scopes", "read", "--test").stdout.strip()
    assert test_key.startswith("tally_test_sk_")


def test_list_keys_never_prints_values_and_revoke_works(cli, workspace):
    key = cli("create-key", "--workspace", workspace, "--scopes", "admin", "--name", "ops").stdout.strip()
    listing = cli("list-keys", "--workspace", workspace)
    assert listing.returncode == 0 and "ops" in listing.stdout
    assert key not in listing.stdout and key[18:] not in listing.stdout
    key_id = listing.stdout.splitlines()[1].split("\t")[0]
    assert key_id.startswith("key_")
    assert cli("revoke-key", key_id).returncode == 0
    assert cli("revoke-key", key_id).returncode == 1
    revoked_at = cli("list-keys", "--workspace", workspace).stdout.splitlines()[1].split("\t")[6]
    assert revoked_at != "-"


def test_bad_arguments_fail_clearly(cli, workspace):
    bad = cli("create-key", "--workspace", workspace, "--scopes", "root")
    assert bad.returncode == 2 and "scopes" in bad.stderr
    assert cli("create-key", "--workspace", workspace, "--scopes", "read", "--expires", "soon").returncode == 2
    assert cli("set-plan", "--workspace", workspace, "--plan", "gold").returncode == 2
    assert cli("set-plan", "--workspace", workspace, "--plan", "enterprise", "--limit", "events=x").returncode == 2


async def test_set_plan_with_custom_limits_applies(cli, client, workspace):
    key = cli("create-key", "--workspace", workspace, "--scopes", "read").stdout.strip()
    done = cli("set-plan", "--workspace", workspace, "--plan", "enterprise", "--limit", "query=2/50")
    assert done.returncode == 0, done.stderr
    statuses = [(await client.get("/v1/events", headers=bearer(key))).status for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_migrate_and_create_user(cli, workspace):
    assert cli("migrate").returncode == 0
    done = cli("create-user", "--workspace", workspace, "--email", "ops@example.com", "--password", "long enough pw")
    assert done.returncode == 0, done.stderr
