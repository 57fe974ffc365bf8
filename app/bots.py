"""Bot and headless-browser detection by User-Agent, for dropping site events.

The pattern list is the maintained `crawlerdetect` package (a port of JayBizzle/Crawler-Detect), plus
automation tools it does not flag. HTTP client libraries (curl, python-requests, ...) count as bots only
when the request came from a page (Origin or Referer present): without those headers the sender is a
backend forwarding events on a visitor's behalf, which the spec allows.
"""

from __future__ import annotations

import re
from functools import lru_cache

from crawlerdetect import CrawlerDetect

_detector = CrawlerDetect()

HEADLESS = re.compile(
    r"headlesschrome|phantomjs|puppeteer|playwright|selenium|webdriver|lighthouse|chrome-lighthouse|"
    r"pagespeed|gtmetrix|pingdom|uptimerobot|slimerjs|electron/.*\bheadless|cypress|prerender",
    re.IGNORECASE,
)
HTTP_CLIENTS = re.compile(
    r"^(curl|wget|python-requests|python-urllib|python/|python-httpx|httpx|aiohttp|go-http-client|"
    r"node-fetch|node|undici|axios|got|okhttp|java|apache-httpclient|ruby|faraday|guzzlehttp|php|dart|"
    r"reqwest|libcurl|rest-client|postmanruntime|insomnia)\b",
    re.IGNORECASE,
)


@lru_cache(maxsize=8192)
def _is_crawler(user_agent: str) -> bool:
    return bool(HEADLESS.search(user_agent)) or _detector.isCrawler(user_agent)


def is_bot(user_agent: str, *, from_page: bool) -> bool:
    """True when the event should be dropped as automated traffic."""
    user_agent = user_agent.strip()
    if not user_agent:
        # Every browser sends a User-Agent; a backend may not.
        return from_page
    if not from_page and HTTP_CLIENTS.match(user_agent):
        return False
    return _is_crawler(user_agent[:1024])
