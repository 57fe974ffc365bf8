"""Baseline: an aiohttp + uvloop hello-world POST handler, the same process type as `tally serve`."""

import sys

import uvloop
from aiohttp import web


async def hello(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"status": "received"})


app = web.Application()
app.router.add_post("/{tail:.*}", hello)
uvloop.install()
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
