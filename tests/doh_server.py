"""A DNS-over-HTTPS JSON resolver on loopback for the verification tests (Cloudflare/Google JSON API).

GET /dns-query?name=<domain>&type=TXT answers the TXT records the test put in `records`, each quoted
as real resolvers do; a name without records gets NXDOMAIN-like Status 3 and no Answer. A name in `aliases`
is a CNAME: as a recursive resolver does, the answer is the CNAME record, then its target's TXT records.
"""

from __future__ import annotations

from aiohttp import web


class DohServer:
    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.aliases: dict[str, str] = {}
        self.queries: list[dict[str, str]] = []
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/dns-query", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.Response:
        self.queries.append({**request.query, "accept": request.headers.get("Accept", "")})
        name = request.query.get("name", "").rstrip(".")
        if request.query.get("type") not in ("TXT", "16"):
            return web.json_response({"Status": 0, "Answer": []}, content_type="application/dns-json")
        question = [{"name": name + ".", "type": 16}]
        answer = []
        if name in self.aliases:
            answer.append({"name": name + ".", "type": 5, "TTL": 300, "data": self.aliases[name] + "."})
            name = self.aliases[name]
        texts = self.records.get(name, [])
        answer += [{"name": name + ".", "type": 16, "TTL": 300, "data": _quote(t)} for t in texts]
        body = {"Status": 0 if answer else 3, "Question": question}
        if answer:
            body["Answer"] = answer
        return web.json_response(body, content_type="application/dns-json")


def _quote(text: str) -> str:
    """Long TXT values come as several 255-byte strings: '"abc" "def"'."""
    chunks = [text[i:i + 255] for i in range(0, len(text), 255)] or [""]
    return " ".join('"' + c.replace("\\", "\\\\").replace('"', '\\"') + '"' for c in chunks)


async def start_doh(aiohttp_server) -> DohServer:
    doh = DohServer()
    server = await aiohttp_server(doh.app())
    doh.url = str(server.make_url("/dns-query"))
    return doh
