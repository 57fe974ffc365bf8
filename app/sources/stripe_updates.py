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

A gap: everything Stripe changed since the last complete reading of the stream (`updates_read`, the second
it started; for a cursor stored before it was kept, the `updates` mark's second) is no longer in Stripe's 30
days: a source paused or failing for longer. The changes inside the gap have no event left, so before listing
anything the sync asks Stripe for each pending charge as it is now (`GET /v1/charges/{id}`), drops those Stripe
no longer has, keeps those settled (`gap`) and lists every customer again, as it is now; one commit. The stream
then reads from an hour inside Stripe's 30 days (GAP_SLACK), and once it has read to its end, a kept charge
it found no event for settled in the gap: it gets its outcome event, stamped where the stream started (the
latest it can have happened: Stripe keeps no settle time). A charge whose event the stream did find gets it at
the event's time.
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
# After a gap the stream starts this far inside Stripe's 30 days, so that a sync retried soon after (the stream
# cut short) does not find a gap again; a charge that settled in it is stamped at its end, an hour late at most.
GAP_SLACK = 3_600
# What an outcome event is made of (StripeConnector._charges), kept of a charge found settled in a gap.
CHARGE_FIELDS = ("id", "customer", "created", "amount", "currency", "status", "paid", "refunded", "amount_refunded",
                 "description")
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


def has_gap(cursor: dict, now: float) -> bool:
    """Whether changes since the stream's last complete reading may be gone from Stripe (the module's text). A
    stream never read has none: its first listing starts where the cursor's marks do (stream_start)."""
    read = cursor.get("updates_read", (cursor.get("updates") or {}).get("t"))
    return read is not None and read < int(now) - RETENTION


class StripeUpdates:
    """The events half of StripeConnector (app/sources/stripe.py), which defines what it uses here."""

    sink: Sink
    _list_new: Callable[..., AsyncIterator[tuple[list[dict], dict | None]]]
    _customers: Callable[[list[dict]], dict]
    _charges: Callable[[list[dict]], dict]
    _retrieve: Callable[..., Awaitable[dict | None]]

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

    async def _bridge_gap(self, retrieve: Callable[[str], Awaitable[stripe.Charge]], cursor: dict) -> None:
        """Before the listings, when the stream has a gap: each pending charge as it is now, the settled ones kept
        for _settle_gap, and every customer listed again; the stream's new start. One commit."""
        start = int(time.time()) - RETENTION + GAP_SLACK
        pending = dict(cursor.get("pending") or {})
        settled = dict((cursor.get("gap") or {}).get("settled") or {})
        for charge_id in sorted(pending.keys() - settled.keys()):
            charge = await self._retrieve(retrieve, charge_id)
            if charge is None:
                del pending[charge_id]  # Stripe no longer has it: nothing will ever settle it
            elif charge.get("status") in OUTCOMES:
                settled[charge_id] = {k: charge.get(k) for k in CHARGE_FIELDS}  # it rides in the cursor a while
        cursor["pending"] = pending
        cursor["gap"] = {"at": start, "settled": settled}
        cursor["updates"] = {"t": start, "ids": []}
        cursor["updates_read"] = start
        cursor.pop("updated_customers", None)
        cursor.pop("customers", None)  # listed again from the first
        await self.sink.commit(Batch(cursor=dict(cursor)))

    async def _settle_gap(self, cursor: dict) -> int:
        """After the stream has read to its end: the charges found settled in a gap that it found no event for
        (still pending) get their outcome, stamped at the gap's end."""
        gap = cursor.pop("gap", None)
        if gap is None:
            return 0
        pending = dict(cursor["pending"])
        settled = [charge for charge_id, charge in sorted(gap["settled"].items())
                   if pending.pop(charge_id, None) is not None]
        rows = self._charges(settled)["events"]
        for row in rows:
            row.ts = datetime.fromtimestamp(gap["at"], UTC)
        cursor["pending"] = pending
        out: list[Imported] = rows
        await self.sink.commit(Batch(events=out, cursor=dict(cursor)))
        return len(rows)

    async def _sync_updates(self, lister: Callable[[dict], Awaitable[stripe.ListObject]], cursor: dict) -> int:
        """List the events since the `updates` mark and commit what they change, page by page."""
        started = int(time.time())
        mark = cursor.get("updates") or {"t": stream_start(cursor, started), "ids": []}
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
                cursor["updates_read"] = started
            await self.sink.commit(Batch(**batch, cursor=dict(cursor)))
            total += len(batch["events"]) + len(batch["traits"])
        return total + await self._settle_gap(cursor)

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
