"""Known traffic sources: the readable name of a referrer host or a utm_source tag, and its category.

A short table in the spirit of the snowplow referer-parser database that Plausible uses, and of the
source categories of Google's default channel grouping: the sources people see most, not every host.
An unknown referrer keeps its host name (without `www.`) as its source, as in Plausible.
"""

from __future__ import annotations

SEARCH, SOCIAL, VIDEO, EMAIL, SHOPPING = "search", "social", "video", "email", "shopping"

# name -> (category, hosts). A host matches itself and its subdomains (`l.facebook.com`, `m.youtube.com`).
KNOWN: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "Google": (SEARCH, ()),  # any google.<tld>: see BRAND_LABELS
    "Bing": (SEARCH, ("bing.com", "ntp.msn.com")),
    "DuckDuckGo": (SEARCH, ("duckduckgo.com",)),
    "Yahoo!": (SEARCH, ()),
    "Yandex": (SEARCH, ("ya.ru",)),
    "Baidu": (SEARCH, ("baidu.com",)),
    "Ecosia": (SEARCH, ("ecosia.org",)),
    "Brave": (SEARCH, ("search.brave.com",)),
    "Qwant": (SEARCH, ("qwant.com",)),
    "Startpage": (SEARCH, ("startpage.com",)),
    "Naver": (SEARCH, ("naver.com",)),
    "Seznam": (SEARCH, ("seznam.cz",)),
    "Sogou": (SEARCH, ("sogou.com",)),
    "Facebook": (SOCIAL, ("facebook.com", "fb.com", "fb.me", "messenger.com")),
    "Instagram": (SOCIAL, ("instagram.com",)),
    "Twitter": (SOCIAL, ("twitter.com", "t.co", "x.com")),
    "LinkedIn": (SOCIAL, ("linkedin.com", "lnkd.in")),
    "Reddit": (SOCIAL, ("reddit.com", "redd.it")),
    "Pinterest": (SOCIAL, ("pinterest.com",)),
    "Hacker News": (SOCIAL, ("news.ycombinator.com",)),
    "Mastodon": (SOCIAL, ("mastodon.social", "mastodon.online")),
    "Bluesky": (SOCIAL, ("bsky.app",)),
    "Threads": (SOCIAL, ("threads.net", "threads.com")),
    "Telegram": (SOCIAL, ("t.me", "web.telegram.org")),
    "Discord": (SOCIAL, ("discord.com", "discordapp.com")),
    "Slack": (SOCIAL, ("slack.com",)),
    "GitHub": (SOCIAL, ("github.com",)),
    "Product Hunt": (SOCIAL, ("producthunt.com",)),
    "TikTok": (SOCIAL, ("tiktok.com",)),
    "Snapchat": (SOCIAL, ("snapchat.com",)),
    "WhatsApp": (SOCIAL, ("whatsapp.com", "wa.me")),
    "VKontakte": (SOCIAL, ("vk.com",)),
    "Quora": (SOCIAL, ("quora.com",)),
    "YouTube": (VIDEO, ("youtube.com", "youtu.be")),
    "Vimeo": (VIDEO, ("vimeo.com",)),
    "Twitch": (VIDEO, ("twitch.tv",)),
    "Dailymotion": (VIDEO, ("dailymotion.com",)),
    "Gmail": (EMAIL, ("mail.google.com",)),
    "Outlook.com": (EMAIL, ("outlook.live.com", "outlook.office.com", "outlook.office365.com")),
    "Yahoo! Mail": (EMAIL, ("mail.yahoo.com",)),
    "Proton Mail": (EMAIL, ("mail.proton.me",)),
    "Amazon": (SHOPPING, ()),
    "eBay": (SHOPPING, ()),
    "Etsy": (SHOPPING, ("etsy.com",)),
    "Shopify": (SHOPPING, ("shopify.com",)),
    "Wikipedia": (None, ("wikipedia.org",)),
    "ChatGPT": (None, ("chatgpt.com", "chat.openai.com")),
    "Perplexity": (None, ("perplexity.ai",)),
    "Linktree": (None, ("linktr.ee",)),
}

# Brands whose every country domain is the same source: the label directly before a one- or two-label
# public suffix of at most three letters each (google.com, google.co.uk, yandex.com.tr, amazon.de).
BRAND_LABELS = {"google": "Google", "bing": "Bing", "yahoo": "Yahoo!", "yandex": "Yandex",
                "amazon": "Amazon", "ebay": "eBay", "duckduckgo": "DuckDuckGo", "baidu": "Baidu"}

# utm_source values (lower-cased) that name a known source by a shorthand; the rest match names.
TAG_ALIASES = {
    "fb": "Facebook", "ig": "Instagram", "yt": "YouTube", "tw": "Twitter", "x": "Twitter", "li": "LinkedIn",
    "google_ads": "Google", "google-ads": "Google", "googleads": "Google", "gads": "Google",
    "adwords": "Google", "bing_ads": "Bing", "bingads": "Bing", "facebook_ads": "Facebook",
    "facebook-ads": "Facebook", "fbads": "Facebook", "fb-ads": "Facebook", "meta": "Facebook",
    "yt-ads": "YouTube", "reddit-ads": "Reddit", "twitter-ads": "Twitter", "tiktokads": "TikTok",
    "linkedin_ads": "LinkedIn", "producthunt": "Product Hunt", "hackernews": "Hacker News", "hn": "Hacker News",
    "duckduckgo": "DuckDuckGo", "yahoo": "Yahoo!", "chatgpt.com": "ChatGPT",
}
# Tags that say the visit was bought, whatever utm_medium says (Plausible's paid sources).
PAID_TAGS = frozenset(t for t in TAG_ALIASES if t.endswith(("ads", "ad")) or t == "adwords")

HOSTS: dict[str, str] = {host: name for name, (_, hosts) in KNOWN.items() for host in hosts}
NAMES: dict[str, str] = {**{name.lower(): name for name in KNOWN}, **TAG_ALIASES}
CATEGORY: dict[str, str | None] = {name: category for name, (category, _) in KNOWN.items()}


def name_of_host(host: str) -> str | None:
    """The known source of a lower-case referrer host, or None."""
    labels = host.split(".")
    for i in range(len(labels) - 1):  # the host itself, then each parent domain
        name = HOSTS.get(".".join(labels[i:]))
        if name is not None:
            return name
    for i in range(len(labels) - 2, max(len(labels) - 4, -1), -1):
        tail = labels[i + 1:]
        if labels[i] in BRAND_LABELS and all(len(t) <= 3 for t in tail):
            return BRAND_LABELS[labels[i]]
    return None


def name_of_tag(tag: str) -> str:
    """utm_source as its known source name when it names one ("google", "ig"), else as given."""
    return NAMES.get(tag.strip().lower(), tag)
