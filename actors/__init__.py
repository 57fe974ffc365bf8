"""Per-site and per-workspace asyncio actors: bounded mailboxes, batched durable flushes."""
