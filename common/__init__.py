"""Neutral building blocks every layer may import (app/, actors/ and storage/ alike): metrics, Redis
Lua scripts, the TTL cache, the service shape and dependency-outage bookkeeping. Nothing here
imports aiohttp or any layer."""
