"""Browser, operating system and device class of a site event, from its User-Agent.

Parsing is `ua-parser` with its maintained regexes (the `ua-parser-builtins` package), on the Rust
resolver (`ua-parser-rs`) when installed. Each distinct User-Agent is parsed once: a site's visitors send
few distinct strings, so the LRU cache below answers almost every event without running a regex.
Names are ua-parser's, with the mobile variants of a browser folded into the browser (the device class
says mobile) the way Plausible shows them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import ua_parser
from ua_parser import Domain

MOBILE, TABLET, LAPTOP, DESKTOP = "Mobile", "Tablet", "Laptop", "Desktop"
# Viewport width (CSS px) below which a device is of that class; anything wider is a desktop.
DEVICE_WIDTHS = ((576, MOBILE), (992, TABLET), (1440, LAPTOP))
MAX_UA = 1024  # longer strings are cut before parsing (and cached by their first 1 KB)

BROWSER_NAMES = {
    "Mobile Safari": "Safari", "Mobile Safari UI/WKWebView": "Safari",
    "Chrome Mobile": "Chrome", "Chrome Mobile iOS": "Chrome",
    "Firefox Mobile": "Firefox", "Firefox iOS": "Firefox",
    "Edge Mobile": "Edge", "Opera Mobile": "Opera", "Opera Mini": "Opera",
}
OS_NAMES = {"Mac OS X": "macOS"}
# Operating systems of phones and tablets: without a width, their events are Mobile unless the parsed
# device says tablet.
MOBILE_OS = frozenset({"iOS", "iPadOS", "Android", "Windows Phone", "BlackBerry OS", "KaiOS", "Firefox OS",
                       "Symbian OS", "Tizen", "HarmonyOS"})
NO_DEVICE = frozenset({"Other", "Mac", "Spider"})


class Client(NamedTuple):
    browser: str | None
    browser_version: str | None  # major version only: "124"
    os: str | None
    os_version: str | None  # "14", or "17.4" when a non-zero minor is given
    device: str | None  # Mobile, Tablet or Desktop from the User-Agent alone (None when it is empty)


_parser = ua_parser.parser  # lazily built by ua_parser on first access; warmed by warm_up()


def warm_up() -> None:
    """Load the regexes now (about 0.1 s) rather than on the first event."""
    parse_client("Mozilla/5.0")


def _version(major: str | None, minor: str | None) -> str | None:
    if not major:
        return None
    return f"{major}.{minor}" if minor and minor.strip("0") else major


@lru_cache(maxsize=8192)
def _parse(user_agent: str) -> Client:
    result = _parser(user_agent.replace("\x00", ""), Domain.ALL)  # PostgreSQL text holds no NUL
    agent, system, device = result.user_agent, result.os, result.device
    browser = None if agent is None or agent.family == "Other" else BROWSER_NAMES.get(agent.family, agent.family)
    os_name = None if system is None or system.family == "Other" else OS_NAMES.get(system.family, system.family)
    return Client(
        browser, agent.major if browser and agent else None,
        os_name, _version(system.major, system.minor) if os_name and system else None,
        _device_from_ua(os_name, device) if user_agent else None,
    )


def _device_from_ua(os_name: str | None, device: ua_parser.Device | None) -> str:
    family = device.family if device else "Other"
    brand = (device.brand or "") if device else ""
    if family == "iPad" or "Tablet" in brand or "Tablet" in family or "Kindle" in family:
        return TABLET
    if os_name in MOBILE_OS or family not in NO_DEVICE:
        return MOBILE
    return DESKTOP


def parse_client(user_agent: str) -> Client:
    user_agent = user_agent.strip()[:MAX_UA]
    try:
        return _parse(user_agent)
    except UnicodeEncodeError:
        # Header bytes that are not UTF-8 arrive as lone surrogates, which the parser cannot take.
        return _parse(user_agent.encode("utf-8", "replace").decode("utf-8"))


def device_for(width: int | None, client: Client) -> str | None:
    """Device class from the viewport width (the tracker sends it), else from the User-Agent."""
    if width is None or width <= 0:
        return client.device
    for limit, name in DEVICE_WIDTHS:
        if width < limit:
            return name
    return DESKTOP
