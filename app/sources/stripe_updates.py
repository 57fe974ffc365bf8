"""Stripe changes after creation, read from Stripe's events (`GET /v1/events`, which keeps 30 days): the
listings read customers and charges once, by `created`, as they are at that moment.

Charges: a charge's status changes once, from `pending` (ACH and SEPA debits stay so for days) to
`succeeded` or `failed`; the other statuses are final. The cursor keeps the charges imported as pending
(`pending`: id -> created second), and a `charge.succeeded` / `charge.failed` event for one of them becomes
the event `charge_succeeded` / `charge_failed`, at the event's `created`, with the charge's properties as the
event holds them, and takes it off the list. Every other such event is skipped: its charge was imported with
that outcome already (created and settled between two syncs: one `charge_succeeded`, from the listing), or
is not imported yet (the next listing reads it as it is then). So where the stream starts can never
duplicate, only miss; and a pending charge's outcome always comes after the listing that saw it pending.
`charge.updated` (description, metadata, shipping) and `charge.captured` (an uncaptured charge is already
`succeeded`) change no status and are not read. Pending charges created over PENDING_KEEP ago are dropped
from the list: bank debits settle within weeks, and the list rides in every page's cursor.

Customers: a `customer.updated` event holds the customer as it was just after that change, so its traits
are set as the customer listing sets them. Stripe lists newest first, so each listing takes only the
newest change of each customer (`updated_customers`, kept in the cursor while a listing is partial, so a
sync cut short does not let an older change, listed after the cut, win).

The stream is incremental like the listings (`updates`: the same created-second mark and `partial` mark).
A source without it (new, or synced by a release that did not read events) starts at the earliest second
its cursor holds (each listing's newest, a partial listing's oldest, each pending charge's), or now, and
never before Stripe's 30 days. A cursor without `pending`
but with charges was stored by such a release: the charges it imported as pending are read once from the
stored `charge_pending` events of the last PENDING_KEEP (Sink.first_seen), so their outcomes come in too.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.sources.base import Batch, Imported

if TYPE_CHECKING:
    import stripe

    from app.sources.base import Sink

UPDATE_TYPES = ("charge.succeeded", "charge.failed", "customer.updated")
OUTCOMES = ("succeeded", "failed")
RETENTION = 30 * 86_400  # Stripe's events
PENDING_KEEP = 90 * 86_400  # a pending charge's outcome is looked for this long after it was created
FORBIDDEN = ("; charge outcomes and customer changes are read from Stripe's events, so a restricted key "
             "needs read access to Events")


def pending_of(charges: list[dict]) -> dict[str, int]:
    """The listed charges imported as pending: id -> created second."""
    return {ch["id"]: ch["created"] for ch in charges if ch.get("status") == "pending"}


def stream_start(cursor: dict, now: float) -> int:
    """The second a source's first listing of events starts at: the earliest second its cursor holds (a mark's
    own, its partial's oldest, a pending charge's), else now, bounded by Stripe's retention."""
    seconds = [int(now), *cursor.get("pending", {}).values()]
    for kind in ("customers", "charges"):
        mark = cursor.get(kind) or {}
        seconds += [mark["t"]] if "t" in mark else []
        below = (mark.get("partial") or {}).get("below")
        seconds += [below["t"]] if below else []
    return max(min(seconds), int(now) - RETENTION)


class StripeUpdates:
    """The events half of StripeConnector (app/sources/stripe.py), which defines what it uses here."""

    sink: Sink
    _list_new: Callable[..., AsyncIterator[tuple[list[dict], dict | None]]]
    _customers: Callable[[list[dict]], dict]
    _charges: Callable[[list[dict]], dict]

    async def _keep_pending(self, cursor: dict) -> None:
        """Set the cursor's `pending` before anything is listed, reading it once from the stored events for a
        cursor stored before it was kept, and committing it at once; drop charges pending for too long."""
        now = time.time()
        if "pending" not in cursor and "charges" in cursor:
            since = datetime.fromtimestamp(now - PENDING_KEEP, UTC)
            seen = await self.sink.first_seen("charge_pending", "charge_id", since)
            cursor["pending"] = {charge_id: int(ts.timestamp()) for charge_id, ts in seen.items()}
            await self.sink.commit(Batch(cursor=dict(cursor)))
        cursor["pending"] = {k: t for k, t in (cursor.get("pending") or {}).items() if t >= now - PENDING_KEEP}

    async def _sync_updates(self, lister: Callable[[dict], Awaitable[stripe.ListObject]], cursor: dict) -> int:
        """List the events since the `updates` mark and commit what they change, page by page."""
        mark = cursor.get("updates") or {"t": stream_start(cursor, time.time()), "ids": []}
        pending: dict[str, int] = dict(cursor.get("pending") or {})
        applied: set[str] = set(cursor.get("updated_customers") or ())
        total = 0
        async for items, new_mark in self._list_new(lister, {"types": list(UPDATE_TYPES)}, mark,
                                                    forbidden=FORBIDDEN):
            batch = self._updates(items, pending, applied)
            cursor["updates"], cursor["pending"] = new_mark, dict(pending)
            if new_mark and "partial" in new_mark:
                cursor["updated_customers"] = sorted(applied)
            else:
                cursor.pop("updated_customers", None)
            await self.sink.commit(Batch(**batch, cursor=dict(cursor)))
            total += len(batch["events"]) + len(batch["traits"])
        return total

    def _updates(self, events: list[dict], pending: dict[str, int], applied: set[str]) -> dict[str, Any]:
        """One page of events (newest first) as the rows they change; `pending` and `applied` are updated."""
        charges: list[tuple[dict, int]] = []
        customers: list[dict] = []
        for evt in events:
            obj = (evt.get("data") or {}).get("object") or {}
            if evt.get("type") == "customer.updated" and obj.get("id") and obj["id"] not in applied:
                applied.add(obj["id"])
                customers.append(obj)
            elif obj.get("id") in pending and obj.get("status") in OUTCOMES:
                del pending[obj["id"]]
                charges.append((obj, evt["created"]))
        rows = self._charges([ch for ch, _ in charges])["events"]
        for row, (_, at) in zip(rows, charges, strict=True):
            row.ts = datetime.fromtimestamp(at, UTC)  # when it settled, not when it was created
        out: list[Imported] = rows
        return {"events": out, **self._customers(customers)}
