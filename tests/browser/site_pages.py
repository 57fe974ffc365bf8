"""Pages of a pretend customer website, served by the live test server only, that embed the tracker.

/__site__/shop?site=ID   script-tag install with the queue stub, a SPA link, a custom event and an outbound link
/__site__/hooks?site=ID  Tally.createTracker with a beforeSend hook that edits, cancels and throws
/__site__/landing        where the outbound link goes (another host name: localhost instead of 127.0.0.1)
/__site__/links?site=ID  script-tag install with file downloads on, a download link and a tagged button
/__doh__?name=D&type=TXT a fake DNS-over-HTTPS JSON resolver answering the TXT records in `TXT_RECORDS`
"""

from __future__ import annotations

import html
import json

from aiohttp import web

# domain -> TXT values the fake resolver publishes; tests add a site's record to let verification pass.
TXT_RECORDS: dict[str, list[str]] = {}


def _site(request: web.Request) -> str:
    return html.escape(request.query["site"], quote=True)


async def shop(request: web.Request) -> web.Response:
    site = _site(request)
    port = request.url.port
    body = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Shop home</title>
<script>
  window.tally = window.tally || function () {{ (window.tally.q = window.tally.q || []).push(arguments) }}
  tally('setDefaultProps', {{ app: 'shop', plan: 'free' }})
</script>
<script defer src="/tracker.js" data-site="{site}" data-allow-localhost="true"></script>
</head><body>
<h1>Shop</h1>
<button id="to-product" type="button">Product page</button>
<button id="signup" type="button">Sign up</button>
<a id="outbound" href="http://localhost:{port}/__site__/landing">Partner site</a>
<script>
  document.getElementById('to-product').addEventListener('click', () => {{
    document.title = 'Product'
    history.pushState({{}}, '', '/__site__/shop/product?id=7&site={site}')
  }})
  document.getElementById('signup').addEventListener('click', () => tally.track('signup', {{ plan: 'pro', step: 2 }}))
</script>
</body></html>"""
    return web.Response(text=body, content_type="text/html")


async def hooks(request: web.Request) -> web.Response:
    site = json.dumps(request.query["site"])
    attr = html.escape(site, quote=True)
    body = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Hooks</title></head><body>
<script src="/tracker.js" data-site={attr} data-auto="false" data-allow-localhost="true"></script>
<script>
  const t = Tally.createTracker({{
    site: {site}, allowLocalhost: true, auto: false, outbound: false, defaultProps: {{ source: 'hooks' }},
    beforeSend(e) {{
      if (e.n === 'secret') return false
      if (e.n === 'boom') throw new Error('hook failed on purpose')
      e.props.hooked = true
      e.u = e.u.split('?')[0]
      return e
    }},
  }})
  t.track('checkout', {{ amount: 42 }})
  t.track('secret', {{ card: '4242' }})
  t.track('boom', {{ x: 1 }})
  t.identify({{ plan: 'team' }})
  window.sent = true
</script>
</body></html>"""
    return web.Response(text=body, content_type="text/html")


async def links(request: web.Request) -> web.Response:
    site = _site(request)
    body = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Links</title>
<script defer src="/tracker.js" data-site="{site}" data-allow-localhost="true" data-auto="false"
        data-downloads="true"></script>
</head><body>
<a id="download" href="/__site__/files/guide.pdf" download>Guide (PDF)</a>
<a id="page" href="#top">Top</a>
<button id="tagged" type="button" data-tally-event="Signup" data-tally-prop-plan="pro"><b>Sign up</b></button>
</body></html>"""
    return web.Response(text=body, content_type="text/html")


async def file(request: web.Request) -> web.Response:
    return web.Response(body=b"%PDF-1.4\n", content_type="application/pdf")


async def landing(request: web.Request) -> web.Response:
    return web.Response(text="<!doctype html><title>Partner</title><h1>Partner site</h1>", content_type="text/html")


async def doh(request: web.Request) -> web.Response:
    name = request.query.get("name", "")
    answers = [{"name": name, "type": 16, "TTL": 60, "data": json.dumps(value)} for value in TXT_RECORDS.get(name, [])]
    return web.json_response({"Status": 0, "Answer": answers}, content_type="application/dns-json")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/__site__/shop", shop)
    router.add_get("/__site__/shop/{tail:.*}", shop)
    router.add_get("/__site__/hooks", hooks)
    router.add_get("/__site__/landing", landing)
    router.add_get("/__site__/links", links)
    router.add_get("/__site__/files/{name}", file)
    router.add_get("/__doh__", doh)

