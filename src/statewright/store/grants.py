"""Grants: room an admission sets aside for its worker's next claims, so that while every
gate has plenty of room a claim is admitted with no statement of its own.

An admission that admits a whole claim, with every gate far from its limit, may take a
grant for the worker that made it: a few slots of each gate with a concurrency (at most a
quarter of the room left, at most ``_AT_MOST``) and a few starts of each start rate, for
``GRANT_MS``. What it takes is counted before it is used, so no other worker can take it:

- the slots are added to the gates' bounds, and every count of the live slots adds the
  slots of each grant not ended ``GRANT_SKEW_MS`` ago (``sw_grants``);
- the starts are a rate log row dated at the grant's end: every window that holds a start
  made from the grant starts before that end, so it counts the row.

The worker's next claims whose gates the grant covers are admitted from it, without
reading or writing anything but the fleet config's version, which the claim statement
returns: a config put since (which drops every grant) ends it, as does its end. No put
commits between a claim's read of the version and the claim's commit (store/fleet_sql.py,
``_version_sql``), so the claims a grant admits are seen by every admission after the put.
Slots and starts of a grant that are never used are counted until the grant ends and the
next count or the window passes: room set aside, never room taken twice. A tenant with a
budget or a limit with a token rate is never granted: what they count is reported after
the start. Pure: the store reads and writes."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # admission is imported where a claim has gates: most claims have none
    from statewright.definition.fleet import Rate
    from statewright.store.admission import Gate, Ledger

GRANT_MS = 1_000
"""How long a grant lasts (shorter for a start rate whose window is under four times that)."""
GRANT_SKEW_MS = 5_000
"""How long after its end a count of the live slots still adds a grant's slots: another
worker's clock may be behind."""
# Slots or starts of one gate a grant takes at most. A worker that claims thousands of
# commands a second under a gate with that much room makes one admission per so many
# claims (at 256, an admission came every 32 claims of 8).
_AT_MOST = 1024
_SHARE = 4  # a grant takes at most this fraction of the room a gate has left
_AT_LEAST = 8  # a gate with room for fewer than this is granted nothing: it is near its limit
# A worker's claiming threads share its store, and with it the grant and its rooms (which a
# grant made by ``with_rooms`` shares too): each spend checks and takes under this lock, so
# two claims never both take the last of a room.
_SPENDING = threading.Lock()


@dataclass
class Room:
    """What a grant set aside for one gate: ``slots`` and ``starts`` left (None: the gate
    has no concurrency, or no start rate), for the capacities a definition gave it, from
    ``made_ms`` until ``expires_ms``."""

    capacities: frozenset[int]
    slots: int | None
    starts: int | None
    made_ms: int
    expires_ms: int


Need = tuple[tuple[Room, int], ...]
"""What a claim draws from a grant (``Grant.need``): each room it passes, with how many of
its commands pass it."""


@dataclass
class Grant:
    """What one worker may admit from without an admission, per gate, while the fleet
    config's version is ``version``."""

    version: int
    rooms: dict[str, Room]
    # From the first room's making to the last room's end: no room admits outside them.
    _since_ms: int = field(init=False, repr=False)
    _until_ms: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._since_ms = min((room.made_ms for room in self.rooms.values()), default=0)
        self._until_ms = max((room.expires_ms for room in self.rooms.values()), default=0)

    def need(self, claimed: Sequence[tuple[Gate, ...]]) -> Need | None:
        """What ``claimed`` (the gates of each command) draws from the rooms: each room it
        passes, with how many of its commands pass it; None where a room one of them needs
        is not there, or was not made for a capacity it names. It holds for the grant's life
        (its rooms are never replaced), so a claim like another may spend it again."""
        from statewright.store.admission import by_set  # a claim with gates has loaded it

        count, sets = by_set(claimed)
        need: dict[str, list[Any]] = {}  # gate -> [its room, how many pass it]
        for key, gates in sets.items():
            for g in gates:
                room = self.rooms.get(g.name)
                if room is None or g.capacity not in room.capacities:
                    return None
                taken = need.get(g.name)
                if taken is None:
                    need[g.name] = [room, count[key]]
                else:
                    taken[1] += count[key]
        return tuple((room, n) for room, n in need.values())

    def spend(self, need: Need, now_ms: int) -> bool:
        """Spend ``need`` (from ``Grant.need``) from its rooms, and say so; spend nothing
        and say False where one of them has ended, is not yet made, or has too little left."""
        with _SPENDING:
            for room, n in need:
                if not room.made_ms <= now_ms < room.expires_ms:
                    return False
                if (room.slots is not None and n > room.slots) or (room.starts is not None and n > room.starts):
                    return False
            for room, n in need:
                if room.slots is not None:
                    room.slots -= n
                if room.starts is not None:
                    room.starts -= n
            return True

    def live(self, now_ms: int) -> bool:
        """Whether a room may still admit (true from the first room's making to the last
        one's end; ``spend`` looks at each room)."""
        return self._since_ms <= now_ms < self._until_ms

    def with_rooms(self, newer: Grant) -> Grant:
        """This grant with ``newer``'s rooms in place of its own, where they share a
        version; else ``newer`` alone."""
        if newer.version != self.version:
            return newer
        return Grant(self.version, {**self.rooms, **newer.rooms})


def grant_of(ledger: Ledger, claimed: Sequence[tuple[Gate, ...]], version: int, now_ms: int) -> Grant | None:
    """The rooms an admission that admitted all of ``claimed`` (counted in ``ledger``) may
    set aside, one per gate of theirs that is far from its limits; None where there are
    none. A gate near its limit, a tenant with a budget, a limit with a token rate, or a
    rate whose count is not at hand gets no room."""
    config = ledger.config
    capacities: dict[str, set[int]] = {}
    for gates in claimed:
        for g in gates:
            capacities.setdefault(g.name, set()).add(g.capacity)
    rooms: dict[str, Room] = {}
    for name, given in capacities.items():
        kind, _, short = name.partition(":")
        cap: int | None = None
        rate: Rate | None = None
        if kind == "tenant":
            share = config.tenants.get(short)
            if share is not None and (share.daily_tokens is not None or share.daily_usd is not None):
                continue
            cap = share.concurrency if share is not None else None
        elif kind == "limit":
            lim = config.limits.get(short)
            if lim is not None and lim.tokens is not None:
                continue
            cap, rate = (lim.concurrency, lim.rate) if lim is not None else (None, None)
        else:
            cap = min(given) or None
        slots = starts = None
        if cap is not None:
            slots = min(_AT_MOST, (cap - ledger.in_use.get(name, cap)) // _SHARE)
            if slots < _AT_LEAST:
                continue
        life = GRANT_MS
        if rate is not None:
            totals = ledger.totals.get((name, rate.window_ms))
            horizon = ledger.horizons.get(name)
            if totals is None or (horizon is not None and now_ms - rate.window_ms < horizon):
                continue
            starts = min(_AT_MOST, (rate.amount - totals[0]) // _SHARE)
            if starts < _AT_LEAST:
                continue
            life = min(life, rate.window_ms // 4)
        rooms[name] = Room(frozenset(given), slots, starts, now_ms, now_ms + life)
    return Grant(version, rooms) if rooms else None


__all__ = ["GRANT_MS", "GRANT_SKEW_MS", "Grant", "Need", "Room", "grant_of"]
