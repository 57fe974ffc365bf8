"""GET /tracker.js: the committed build, long-cached, revalidated with a strong ETag."""

import gzip

from app.views.tracker import TRACKER_PATH, etag_matches


async def test_tracker_is_the_committed_build_with_long_cache(client):
    resp = await client.get("/tracker.js", headers={"Accept-Encoding": "identity"}, auto_decompress=False)
    assert resp.status == 200
    assert await resp.read() == TRACKER_PATH.read_bytes()
    assert resp.headers["Content-Type"] == "application/javascript; charset=utf-8"
    assert resp.headers["Cache-Control"] == "public, max-age=86400"
    etag = resp.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert "Content-Encoding" not in resp.headers


async def test_if_none_match_gives_304_and_stale_etag_gives_200(client):
    first = await client.get("/tracker.js", headers={"Accept-Encoding": "identity"})
    etag = first.headers["ETag"]
    again = await client.get("/tracker.js", headers={"Accept-Encoding": "identity", "If-None-Match": etag})
    assert again.status == 304
    assert await again.read() == b""
    assert again.headers["ETag"] == etag
    assert again.headers["Cache-Control"] == "public, max-age=86400"
    listed = await client.get("/tracker.js", headers={"Accept-Encoding": "identity",
                                                      "If-None-Match": f'"other", W/{etag}'})
    assert listed.status == 304
    stale = await client.get("/tracker.js", headers={"Accept-Encoding": "identity", "If-None-Match": '"stale"'})
    assert stale.status == 200
    assert await stale.read() == TRACKER_PATH.read_bytes()


async def test_gzip_variant_has_its_own_etag(client):
    plain = await client.get("/tracker.js", headers={"Accept-Encoding": "identity"})
    zipped = await client.get("/tracker.js", headers={"Accept-Encoding": "gzip, br"}, auto_decompress=False)
    assert zipped.status == 200
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in zipped.headers["Vary"]
    assert gzip.decompress(await zipped.read()) == TRACKER_PATH.read_bytes()
    assert zipped.headers["ETag"] != plain.headers["ETag"]
    revalidated = await client.get("/tracker.js", headers={"Accept-Encoding": "gzip",
                                                           "If-None-Match": zipped.headers["ETag"]})
    assert revalidated.status == 304


async def test_versioned_url_is_immutable(client):
    etag = (await client.get("/tracker.js", headers={"Accept-Encoding": "identity"})).headers["ETag"]
    version = etag.strip('"')
    resp = await client.get(f"/tracker.js?v={version}", headers={"Accept-Encoding": "identity"})
    assert resp.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    other = await client.get("/tracker.js?v=old", headers={"Accept-Encoding": "identity"})
    assert other.headers["Cache-Control"] == "public, max-age=86400"


def test_etag_comparison_is_weak_for_if_none_match():
    assert etag_matches('"a"', '"a"')
    assert etag_matches('W/"a"', '"a"')
    assert etag_matches("*", '"a"')
    assert not etag_matches('"b"', '"a"')
    assert not etag_matches("", '"a"')
