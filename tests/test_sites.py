"""GET/POST /api/sites and GET/POST /api/verify, against a DNS-over-HTTPS server on loopback."""

from __future__ import annotations

import dataclasses
import secrets

import asyncpg
import orjson
import pytest

from app.appkeys import SITE_RUNTIME
from app.views.sites import normalize_domain, site_id_for
from tests.doh_server import start_doh
from tests.site_helpers import post_event, register_site, stored_events, unique_domain


@pytest.fixture
async def doh(aiohttp_server):
    return await start_doh(aiohttp_server)


@pytest.fixture
async def app_client(make_client, settings, doh):
    """Development app whose resolver is the local DoH server."""
    return await make_client(dataclasses.replace(settings, doh_url=doh.url))


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/sites"), ("POST", "/api/sites"), ("GET", "/api/verify?site=x"), ("POST", "/api/verify?site=x"),
])
async def test_session_required(client, method, path):
    resp = await client.request(method, path, data={"domain": "example.com"})
    assert resp.status == 401
    assert await resp.json() == {"error": "unauthorized"}


@pytest.mark.parametrize(("raw", "domain"), [
    ("example.com", "example.com"),
    ("https://www.Example.COM/some/path?q=1#x", "example.com"),
    ("http://shop.example.co.uk:8080", "shop.example.co.uk"),
    ("  WWW.example.org.  ", "example.org"),
    ("https://user:pw@blog.example.net/", "blog.example.net"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("www.com", "www.com"),
    ("https://WWW.com./", "www.com"),
    ("www.www.com", "www.com"),
    ("www.example.co.uk", "example.co.uk"),
])
def test_normalize_domain(raw, domain):
    assert normalize_domain(raw) == domain


@pytest.mark.parametrize("raw", ["", "localhost", "http://", "exa mple.com", "-bad.com", "a..com", "1.2.3.4",
                                 "example.com_", "x" * 64 + ".com", "a.com\\@evil.com", "a.com @evil.com"])
def test_invalid_domains(raw):
    assert normalize_domain(raw) is None


async def test_create_by_form_and_json_is_idempotent(client, login):
    await login()
    domain = unique_domain()
    resp = await client.post("/api/sites", data={"domain": f"https://www.{domain}/pricing"})
    assert resp.status == 200
    created = await resp.json()
    assert created == {"id": site_id_for(domain), "domain": domain, "timezone": "UTC"}
    again = await client.post("/api/sites", json={"domain": domain.upper()})
    assert again.status == 200 and await again.json() == created
    listed = await (await client.get("/api/sites")).json()
    assert [s["id"] for s in listed] == [created["id"]]
    assert listed[0]["domain"] == domain and listed[0]["status"] == "pending" and listed[0]["verified"] is False
    assert listed[0]["createdAt"].endswith("Z")


async def test_a_domain_named_www_is_registered_as_itself(client, login):
    """The leading `www.` went whatever followed it, so www.com became `com`, no domain here: a 400. It goes
    only when a domain with a dot remains."""
    await login()
    domain = f"www.x{secrets.token_hex(4)}"  # a top-level label of digits alone is no domain name
    for raw in (domain, f"https://{domain.upper()}/"):
        resp = await client.post("/api/sites", data={"domain": raw})
        assert (resp.status, await resp.json()) == (
            200, {"id": site_id_for(domain), "domain": domain, "timezone": "UTC"})
    assert [s["domain"] for s in await (await client.get("/api/sites")).json()] == [domain]


async def test_json_bodies_may_start_with_a_byte_order_mark(client, login):
    # PowerShell and .NET write one; RFC 8259 lets a parser skip it, as the ingestion endpoints do.
    await login()
    domain = unique_domain()
    bom = b"\xef\xbb\xbf"
    json_type = {"Content-Type": "application/json"}
    resp = await client.post("/api/sites", data=bom + orjson.dumps({"domain": domain}), headers=json_type)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["domain"] == domain
    goal = await client.post(f"/api/sites/{site_id_for(domain)}/goals", headers=json_type,
                             data=bom + orjson.dumps({"goal_type": "event", "event_name": "signup"}))
    assert goal.status in (200, 201), await goal.text()
    twice = await client.post("/api/sites", data=bom + bom + orjson.dumps({"domain": domain}), headers=json_type)
    assert twice.status == 400 and await twice.json() == {"error": "invalid json"}


@pytest.mark.parametrize("body", [{"domain": "localhost"}, {"domain": "not a domain"}, {"domain": ""}, {}])
async def test_invalid_domain_is_400(client, login, body):
    await login()
    resp = await client.post("/api/sites", data=body)
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid domain"}


@pytest.mark.parametrize("raw", ["a.com\\@{d}", "https://a.com\\@{d}/", "a.com\\\\@{d}", "a.com @{d}",
                                 "https://a.com\t@{d}", 'a.com"@{d}', "a.com<@{d}", "a.com\\{d}"])
async def test_a_domain_with_characters_no_host_name_has_is_400_and_creates_nothing(client, login, database_url,
                                                                                   raw):
    """`a.com\\@evil.com` registered evil.com: the backslash and what precedes the `@` were taken for a URL's
    user name, as Python's URL parsing takes them, while a browser reads the backslash as a slash (the host
    a.com). Before the host only a URL's user-info characters may stand; anything else is no domain."""
    await login()
    domain = unique_domain()
    for send in ({"data": {"domain": raw.format(d=domain)}}, {"json": {"domain": raw.format(d=domain)}}):
        resp = await client.post("/api/sites", **send)
        assert (resp.status, await resp.json()) == (400, {"error": "invalid domain"})
    assert await (await client.get("/api/sites")).json() == []
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM sites WHERE domain = $1", domain) == 0
    finally:
        await conn.close()


async def test_list_is_newest_first_capped_at_50_and_per_workspace(client, login, workspace, database_url):
    await login()
    await register_site(database_url, f"other-{workspace}")  # another workspace's site
    conn = await asyncpg.connect(database_url)
    try:
        workspace_id = await conn.fetchval("SELECT id FROM workspaces WHERE name = $1", workspace)
        await conn.executemany(
            "INSERT INTO sites (id, workspace_id, domain, verification_token, created_at) "
            "VALUES ($1, $2, $3, 't', now() - make_interval(mins => $4))",
            [(f"bulk-{secrets.token_hex(4)}-{i}", workspace_id, f"d{i}-{secrets.token_hex(3)}.example", i)
             for i in range(55)],
        )
    finally:
        await conn.close()
    resp = await client.get("/api/sites")
    listed = await resp.json()
    assert len(listed) == 50
    assert [s["domain"].split("-")[0] for s in listed] == [f"d{i}" for i in range(50)]
    # Beyond the spec, the dashboard reaches the others: how many there are, and the next 50 by offset.
    assert resp.headers["X-Total-Count"] == "55"
    resp = await client.get("/api/sites?offset=50")
    older = await resp.json()
    assert resp.status == 200 and resp.headers["X-Total-Count"] == "55"
    assert [s["domain"].split("-")[0] for s in older] == [f"d{i}" for i in range(50, 55)]
    assert set(older[0]) == {"id", "domain", "status", "verified", "verifiedAt", "createdAt", "timezone"}
    assert await (await client.get("/api/sites?offset=")).json() == listed
    assert await (await client.get(f"/api/sites?offset={10**30}")).json() == []
    for bad in ("-1", "x", "1.5"):
        resp = await client.get(f"/api/sites?offset={bad}")
        assert (resp.status, await resp.json()) == (400, {"error": "invalid offset"})


async def test_domain_of_another_workspace_is_409(client, login, database_url, workspace):
    _, domain = await register_site(database_url, f"other-{workspace}")
    await login()
    resp = await client.post("/api/sites", data={"domain": domain})
    assert resp.status == 409
    assert await resp.json() == {"error": "domain already registered"}
    assert await (await client.get("/api/sites")).json() == []


async def test_verification_through_doh(app_client, login, doh, database_url):
    await login(the_client=app_client)
    domain = unique_domain()
    site = (await (await app_client.post("/api/sites", data={"domain": domain})).json())["id"]

    pending = await (await app_client.get(f"/api/verify?site={site}")).json()
    assert pending["status"] == "pending" and pending["domain"] == domain
    assert pending["record"].startswith("tally-verify=") and len(pending["record"]) > len("tally-verify=") + 16
    # The id with spaces around it (pasted) is the site, as siteId is to the analytics reads.
    assert await (await app_client.get(f"/api/verify?site=%20{site}%0A")).json() == pending

    doh.records[domain] = ["v=spf1 -all"]
    resp = await app_client.post(f"/api/verify?site={site}")
    assert resp.status == 200
    assert await resp.json() == pending
    assert doh.queries[-1] == {"name": domain, "type": "TXT", "accept": "application/dns-json"}

    doh.records[domain] = ["v=spf1 -all", pending["record"]]
    resp = await app_client.post(f"/api/verify?site=%20{site}")
    assert await resp.json() == {"status": "verified", "domain": domain}
    assert await (await app_client.get(f"/api/verify?site={site}")).json() == {"status": "verified",
                                                                                "domain": domain}
    listed = await (await app_client.get("/api/sites")).json()
    assert listed[0]["status"] == "verified" and listed[0]["verifiedAt"]


async def test_record_on_a_subdomain_or_other_token_does_not_verify(app_client, login, doh):
    await login(the_client=app_client)
    domain = unique_domain()
    site = (await (await app_client.post("/api/sites", data={"domain": domain})).json())["id"]
    record = (await (await app_client.get(f"/api/verify?site={site}")).json())["record"]
    doh.records[f"_tally.{domain}"] = [record]
    doh.records[domain] = ["tally-verify=someone-elses-token"]
    assert (await (await app_client.post(f"/api/verify?site={site}")).json())["status"] == "pending"


async def test_a_cname_d_name_verifies_by_the_record_at_its_target(app_client, login, doh):
    """A CNAME'd name can hold no TXT record of its own (docs/decisions.md, "A site on a CNAME'd name"): the
    resolver follows the CNAME and answers its target's records, which is where such a site's owner publishes."""
    await login(the_client=app_client)
    domain, target = f"blog.{unique_domain()}", f"edge.{unique_domain()}"
    site = (await (await app_client.post("/api/sites", data={"domain": domain})).json())["id"]
    record = (await (await app_client.get(f"/api/verify?site={site}")).json())["record"]
    doh.aliases[domain] = target
    assert (await (await app_client.post(f"/api/verify?site={site}")).json())["status"] == "pending"
    doh.records[target] = [record]
    assert await (await app_client.post(f"/api/verify?site={site}")).json() == {"status": "verified",
                                                                                 "domain": domain}


async def test_resolver_failure_says_the_resolver_could_not_be_reached(make_client, settings, login, database_url):
    resolver = "http://127.0.0.1:9/dns-query"
    client = await make_client(dataclasses.replace(settings, doh_url=resolver))
    await login(the_client=client)
    site = (await (await client.post("/api/sites", data={"domain": unique_domain()})).json())["id"]
    resp = await client.post(f"/api/verify?site={site}")
    assert resp.status == 502
    body = await resp.json()
    assert body["error"] == f"could not reach the DNS-over-HTTPS resolver at {resolver}"
    assert body["resolver"] == resolver and body["reason"].startswith("connection failed")
    assert body["status"] == "pending" and body["record"].startswith("tally-verify=")


async def test_a_resolver_error_answer_is_reported_too(make_client, settings, login, aiohttp_server):
    from aiohttp import web

    broken = web.Application()

    async def down(request):
        return web.Response(status=503, text="down")

    broken.router.add_get("/dns-query", down)
    resolver = str((await aiohttp_server(broken)).make_url("/dns-query"))
    client = await make_client(dataclasses.replace(settings, doh_url=resolver))
    await login(the_client=client)
    site = (await (await client.post("/api/sites", data={"domain": unique_domain()})).json())["id"]
    body = await (await client.post(f"/api/verify?site={site}")).json()
    assert body["error"] == f"could not reach the DNS-over-HTTPS resolver at {resolver}"
    assert body["reason"] == "the resolver answered HTTP 503"


@pytest.mark.parametrize("published", ["{record} ", "\t{record}\n", '"{record}"', '" {record} "'])
async def test_a_record_published_with_spaces_or_quotes_around_it_verifies(app_client, login, doh, published):
    """Copying the record from the page takes a line break or space along, and some DNS panels want the value
    in quotes and keep quotes typed into it: the value is still the record, and "Record not found yet" was
    all the user heard."""
    await login(the_client=app_client)
    domain = unique_domain()
    site = (await (await app_client.post("/api/sites", data={"domain": domain})).json())["id"]
    record = (await (await app_client.get(f"/api/verify?site={site}")).json())["record"]
    doh.records[domain] = ["x" + record, record + "x", published.format(record=record)]
    assert await (await app_client.post(f"/api/verify?site={site}")).json() == {"status": "verified",
                                                                                "domain": domain}


async def test_a_record_inside_other_text_does_not_verify(app_client, login, doh):
    await login(the_client=app_client)
    domain = unique_domain()
    site = (await (await app_client.post("/api/sites", data={"domain": domain})).json())["id"]
    record = (await (await app_client.get(f"/api/verify?site={site}")).json())["record"]
    doh.records[domain] = [f"x{record}", f"{record}x", f"{record} {record}", f'"{record}', f"v=1 {record}"]
    assert (await (await app_client.post(f"/api/verify?site={site}")).json())["status"] == "pending"


@pytest.mark.parametrize(("status", "name"), [(2, "SERVFAIL"), (5, "REFUSED")])
async def test_a_failed_lookup_is_not_a_missing_record(make_client, settings, login, aiohttp_server, database_url,
                                                       status, name):
    """The resolver answered, but could not look the name up (a broken DNSSEC chain, an unreachable
    authoritative server): the record may well be there, so the answer must not tell the user to publish it."""
    from aiohttp import web

    failing = web.Application()

    async def answer(request):
        return web.json_response({"Status": status, "Question": [{"name": request.query["name"], "type": 16}]},
                                 content_type="application/dns-json")

    failing.router.add_get("/dns-query", answer)
    resolver = str((await aiohttp_server(failing)).make_url("/dns-query"))
    client = await make_client(dataclasses.replace(settings, doh_url=resolver))
    await login(the_client=client)
    domain = unique_domain()
    site = (await (await client.post("/api/sites", data={"domain": domain})).json())["id"]
    resp = await client.post(f"/api/verify?site={site}")
    assert resp.status == 502
    body = await resp.json()
    assert body["error"] == f"the DNS-over-HTTPS resolver at {resolver} could not look up {domain}"
    assert body["reason"] == f"the resolver answered {name} (DNS status {status})"
    assert body["status"] == "pending" and body["record"].startswith("tally-verify=") and body["domain"] == domain
    assert (await (await client.get(f"/api/verify?site={site}")).json())["status"] == "pending"


async def test_an_unverified_claim_does_not_block_the_owner_who_verifies(app_client, make_client, settings,
                                                                         login, doh, database_url, workspace):
    """Someone else claimed the domain first and never verified it: the real owner still registers
    (under an id of its own), verifies and owns it; the squatter can then no longer verify."""
    domain = unique_domain()
    squatter = f"squat-{workspace}"
    squat_id, _ = await register_site(database_url, squatter, domain, verified=False)
    assert squat_id == site_id_for(domain)

    await login(the_client=app_client)
    resp = await app_client.post("/api/sites", data={"domain": domain})
    assert resp.status == 200, await resp.text()
    mine = await resp.json()
    conn = await asyncpg.connect(database_url)
    try:
        my_workspace_id = await conn.fetchval("SELECT id FROM workspaces WHERE name = $1", workspace)
    finally:
        await conn.close()
    assert mine == {"id": site_id_for(domain, my_workspace_id), "domain": domain, "timezone": "UTC"}
    assert (await app_client.post("/api/sites", data={"domain": domain})).status == 200  # same answer again
    doh.records[domain] = [(await (await app_client.get(f"/api/verify?site={mine['id']}")).json())["record"]]
    resp = await app_client.post(f"/api/verify?site={mine['id']}")
    assert await resp.json() == {"status": "verified", "domain": domain}

    # The squatter publishes its own record too, too late: the domain has its owner.
    other = await make_client(dataclasses.replace(settings, doh_url=doh.url))
    await login(the_client=other, workspace_name=squatter)
    doh.records[domain].append((await (await other.get(f"/api/verify?site={squat_id}")).json())["record"])
    resp = await other.post(f"/api/verify?site={squat_id}")
    assert resp.status == 409
    assert await resp.json() == {"error": "domain verified by another workspace"}
    assert (await (await other.get("/api/sites")).json())[0]["status"] == "pending"
    # And nobody else can claim a verified domain.
    third = await make_client(settings)
    await login(the_client=third, workspace_name=f"third-{workspace}")
    resp = await third.post("/api/sites", data={"domain": domain})
    assert resp.status == 409 and await resp.json() == {"error": "domain already registered"}


async def test_two_verifications_of_one_domain_cannot_both_win(database_url, workspace, client):
    from storage import sites as site_store

    domain = unique_domain()
    first, _ = await register_site(database_url, f"a-{workspace}", domain, verified=False)
    conn = await asyncpg.connect(database_url)
    try:
        ws_b = await conn.fetchval("INSERT INTO workspaces (name) VALUES ($1) RETURNING id", f"b-{workspace}")
        second = site_id_for(domain, ws_b)
        await site_store.create_site(conn, second, ws_b, domain, "token")
        assert await site_store.mark_verified(conn, second) is True
        assert await site_store.mark_verified(conn, first) is False
        assert await conn.fetchval("SELECT count(*) FROM sites WHERE domain = $1 AND verified_at IS NOT NULL",
                                   domain) == 1
    finally:
        await conn.close()


async def test_unknown_foreign_and_missing_site(app_client, login, database_url, workspace):
    await login(the_client=app_client)
    for method in ("GET", "POST"):
        resp = await app_client.request(method, "/api/verify?site=does-not-exist")
        assert resp.status == 200 and await resp.json() == {"status": "not_found"}
        foreign, _ = await register_site(database_url, f"other-{workspace}", verified=False)
        resp = await app_client.request(method, f"/api/verify?site={foreign}")
        assert resp.status == 404 and await resp.json() == {"error": "not found"}
        resp = await app_client.request(method, "/api/verify")
        assert resp.status == 400 and await resp.json() == {"error": "missing site"}


async def test_verified_site_accepts_production_events(app_client, make_client, settings, login, doh,
                                                       database_url):
    """End to end: register, publish the record, verify, then ingest in production from the domain.
    (The dashboard is driven through a development app: production cookies are Secure-only.)"""
    prod = await make_client(dataclasses.replace(settings, env="production"))
    await login(the_client=app_client)
    domain = unique_domain()
    site = (await (await app_client.post("/api/sites", data={"domain": domain})).json())["id"]
    origin = {"Origin": f"https://www.{domain}"}
    refused = await post_event(prod, {"s": site, "n": "pageview"}, origin)
    assert refused.status == 403 and await refused.json() == {"error": "site not verified"}
    doh.records[domain] = [(await (await app_client.get(f"/api/verify?site={site}")).json())["record"]]
    assert (await (await app_client.post(f"/api/verify?site={site}")).json())["status"] == "verified"
    prod.app[SITE_RUNTIME].sites.forget(site)  # another process: its cache would expire within seconds
    assert (await post_event(prod, {"s": site, "n": "pageview"}, origin)).status == 202
    assert len(await stored_events(database_url, site)) == 1
