"""Admission: whether a claimed command may start now under the fleet's limits, shared by
every store. A claim that carries gates (a workflow's or step's concurrency, named limits,
a tenant with a limit or a budget) is admitted inside one transaction that no other
admission runs beside (SQLite's single writer; an advisory lock on PostgreSQL; the
in-memory database's lock), so two workers can never both take the last slot:

    claim (due, by priority, then fair share) -> admit each in order -> slots and rate log
                                              -> or give it back, waiting, with its reason

A command that may not start is never failed for it: it is given back without its delivery
counting and becomes due again when room is expected (a rate window moves on, the next UTC
day for a spent budget), or earlier when a slot frees (``Store.wake``). A slot is the
claim's lease itself: an admitted command's outbox row keeps the fencing token of the claim
it was admitted with, and holds a slot of each of its gates while that claim's lease is
alive, so a finished, released or expired claim frees its slots with no write of its own.
So that an admission need not read every live slot, each gate also has a bound: every
admission adds what it takes, nothing takes away, so a bound is never below the live slots,
and what fits under it fits. Only where a bound leaves no room (and every
``_COUNT_EVERY_MS`` in store/fleet_sql.py) are the slots counted one by one, and the bound
comes down to them. Pure: the store hands in what it counts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from statewright._record import record
from statewright.definition.fleet import DAY_MS, FleetConfig, Rate

CONCURRENCY_RECHECK_MS = 2_000
"""A command waiting for a slot looks again after this long if no finishing step woke it
(the holder's worker died and its lease must expire first)."""


@record
class Gate:
    """One gate a command passes: ``workflow:W``, ``step:W/S``, ``limit:L`` or ``tenant:T``;
    ``capacity`` is the concurrency a definition gave (0: from the fleet config)."""

    name: str
    capacity: int = 0


def gates_json(gates: Sequence[Gate]) -> str | None:
    """The column text of a command's gates (None when it has none)."""
    return json.dumps([[g.name, g.capacity] for g in gates], separators=(",", ":")) if gates else None


@lru_cache(maxsize=1024)
def gates_of(text: str | None) -> tuple[Gate, ...]:
    """The gates a command's column text names (parsed once per distinct text: the commands
    of one step share it)."""
    if not text:
        return ()
    return tuple(Gate(str(n), int(c)) for n, c in json.loads(text))


def slots_in_use(holders: Iterable[tuple[str | None, str]]) -> dict[str, int]:
    """Live slots per gate, from the (gates text, tenant) of every command whose admitted
    claim still holds its lease: each holds a slot of each of its gates and of its tenant's."""
    out: dict[str, int] = {}
    for text, tenant in holders:
        for g in gates_of(text):
            out[g.name] = out.get(g.name, 0) + 1
        if tenant:
            name = f"tenant:{tenant}"
            out[name] = out.get(name, 0) + 1
    return out


@record
class Waiting:
    """Why a command may not start now: ``reason`` for people, due again at ``until_ms``;
    ``gate`` is what wakes it earlier (a slot's gate, ``budget:T``), or ""."""

    reason: str
    until_ms: int
    gate: str = ""


@dataclass
class Ledger:
    """What the gates of one admission count: the live slots of every gate (counted before
    it, ``slots_in_use``), the rate log and the budgets loaded once per gate from the store
    (through the callables), all kept up to date with what this admission takes."""

    config: FleetConfig
    # Live slots per gate (a gate missing has none); with ``load_in_use``, at most as many:
    # each gate's bound, or one missing where ``load_bound`` tells it.
    in_use: dict[str, int]
    load_window: Callable[[str, int], list[tuple[int, int, int]]]  # (at_ms, starts, tokens) of rows after a time
    load_spent: Callable[[str, int], tuple[int, float]]  # (tokens, usd) of a tenant on a day
    load_totals: Callable[[str, int], tuple[int, int]] | None = None  # (starts, tokens) after a time
    load_horizon: Callable[[str], int | None] | None = None  # up to when a gate's rows may be forgotten
    windows: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)  # rows this admission added
    spent: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    window_ms: dict[str, int] = field(default_factory=dict)  # the longest window each rate gate was read for
    totals: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (gate, window) -> [starts, tokens]
    horizons: dict[str, int | None] = field(default_factory=dict)  # gate -> its rows up to here may be gone
    # Live slots per gate counted one by one, for when a bound leaves a gate no room: while
    # this is set, ``in_use`` holds bounds. A bound is never below the live slots, so that
    # what fits under it fits; what does not is decided on the count.
    load_in_use: Callable[[], dict[str, int]] | None = None
    load_bound: Callable[[str], int | None] | None = None  # a gate's bound; None: it has none
    taken: dict[str, int] = field(default_factory=dict)  # slots this admission took, per gate
    checked: set[str] = field(default_factory=set)  # the gates with a concurrency it looked at
    counted: bool = False  # whether ``in_use`` was counted one by one during this admission

    def check(self, gates: Sequence[Gate], now_ms: int, need: Mapping[str, int] | None = None) -> Waiting | None:
        """None when a command with ``gates`` may start at ``now_ms``; else why it waits.
        With ``need`` (per gate, how many commands would start together): None only when
        that many fit in each gate at once, so that each of them, admitted in turn, would
        be admitted."""
        for g in gates:
            more = need[g.name] if need is not None else 1
            kind, _, name = g.name.partition(":")
            if kind == "tenant":
                why = self._tenant(name, g.name, now_ms, more)
            elif kind == "limit":
                why = self._limit(name, g.name, now_ms, more)
            else:
                why = self._slots(g.name, g.capacity, now_ms, more)
            if why is not None:
                return why
        return None

    def take_all(
        self, claimed: Sequence[tuple[Gate, ...]], now_ms: int
    ) -> dict[int, tuple[list[str], list[str]]] | None:
        """When every command of a claim (``claimed``: the gates of each) may start, count
        them all and give, per set of gates (keyed by identity: ``claim_gates`` hands out one
        tuple per set), what ``take`` gives each command of that set: where all fit at once,
        each would be admitted in turn too. Each gate is checked once, for all the commands
        that pass it, and counted once. None, counting nothing, where they do not all fit at
        the lowest capacity a gate is given (definitions may give one gate different ones):
        then each is decided in turn."""
        count, distinct = by_set(claimed)
        need: dict[str, int] = {}
        each: dict[tuple[str, int], Gate] = {}  # every gate once, with each capacity it is given
        for key, gates in distinct.items():
            for g in gates:
                need[g.name] = need.get(g.name, 0) + count[key]
                each[(g.name, g.capacity)] = g
        if any(self.check((g,), now_ms, need) is not None for g in each.values()):
            return None
        taken = self._take_sets([(gates, count[key]) for key, gates in distinct.items()], now_ms)
        return dict(zip(distinct, taken, strict=True))

    def forgettable(self, now_ms: int) -> dict[str, int]:
        """Per rate gate read: rows before this no window can count any longer (two windows
        back, so a worker whose clock is somewhat behind still sees what it must count; one
        further behind waits, see ``_room_at``)."""
        return {gate: now_ms - 2 * w for gate, w in self.window_ms.items()}

    def take(self, gates: Sequence[Gate], now_ms: int, times: int = 1) -> tuple[list[str], list[str]]:
        """Count ``times`` commands admitted with ``gates``: the gates each holds a slot of,
        and the named limits whose rate log each joins."""
        return self._take_sets([(gates, times)], now_ms)[0]

    def _take_sets(
        self, sets: Sequence[tuple[Sequence[Gate], int]], now_ms: int
    ) -> list[tuple[list[str], list[str]]]:
        """Count the commands admitted with each set of gates (the gates, how many): what
        ``take`` gives each set; each gate's count is changed once for all."""
        out: list[tuple[list[str], list[str]]] = []
        slots_taken: dict[str, int] = {}
        rates_taken: dict[str, int] = {}
        for gates, times in sets:
            slots, rates = self._roles(gates)
            for name in slots:
                slots_taken[name] = slots_taken.get(name, 0) + times
            for name in rates:
                rates_taken[name] = rates_taken.get(name, 0) + times
            out.append((slots, rates))
        for name, times in slots_taken.items():
            self.in_use[name] = self._used(name) + times
            self.taken[name] = self.taken.get(name, 0) + times
        for name, times in rates_taken.items():
            self.windows.setdefault(name, []).append((now_ms, times, 0))  # taken by this admission
            for key, totals in self.totals.items():
                if key[0] == name:
                    totals[0] += times
        return out

    def _roles(self, gates: Sequence[Gate]) -> tuple[list[str], list[str]]:
        """Of ``gates``, those a command admitted holds a slot of, and the named limits
        whose rate log it joins."""
        slots, rates = [], []
        for g in gates:
            kind, _, name = g.name.partition(":")
            if kind == "limit":
                lim = self.config.limits.get(name)
                if lim is not None and lim.concurrency is not None:
                    slots.append(g.name)
                if lim is not None and (lim.rate is not None or lim.tokens is not None):
                    rates.append(g.name)
            elif self.capacity(g) is not None:
                slots.append(g.name)
        return slots, rates

    # --- the checks ----------------------------------------------------------------------
    def capacity(self, g: Gate) -> int | None:
        kind, _, name = g.name.partition(":")
        if kind == "limit":
            lim = self.config.limits.get(name)
            return lim.concurrency if lim is not None else None
        if kind == "tenant":
            share = self.config.tenants.get(name)
            return share.concurrency if share is not None else None
        return g.capacity or None

    def bounds(self) -> dict[str, int]:
        """What this admission leaves the bounds of its gates at: the slots it counted or
        was bounded by, with what it took; only where that changed. Other gates keep theirs,
        which are still bounds: one that leaves its gate no room is counted where it does."""
        return {g: self.in_use.get(g, 0) for g in (self.checked if self.counted else self.taken)}

    def _used(self, gate: str) -> int:
        """The live slots of ``gate``, or at most as many (see ``in_use``)."""
        if gate not in self.in_use and self.load_in_use is not None:
            bound = self.load_bound(gate) if self.load_bound is not None else None
            if bound is None:  # never bounded: counted
                self._count()
            else:
                self.in_use[gate] = bound + self.taken.get(gate, 0)
        return self.in_use.get(gate, 0)

    def _count(self) -> None:
        """Count every gate's live slots one by one, from here on in this admission."""
        if self.load_in_use is None:
            return
        counted = self.load_in_use()
        for g, n in self.taken.items():
            counted[g] = counted.get(g, 0) + n
        self.in_use, self.load_in_use, self.counted = counted, None, True

    def _slots(self, gate: str, capacity: int | None, now_ms: int, more: int = 1) -> Waiting | None:
        if capacity is None:
            return None
        self.checked.add(gate)
        used = self._used(gate)
        if used + more <= capacity:
            return None
        if self.load_in_use is not None:  # a bound: what it holds back is counted
            self._count()
            used = self.in_use.get(gate, 0)
            if used + more <= capacity:
                return None
        return Waiting(f"waits for a slot of {_what(gate)} (concurrency {capacity}, {used} in use)",
                       now_ms + CONCURRENCY_RECHECK_MS, gate)

    def _limit(self, name: str, gate: str, now_ms: int, more: int = 1) -> Waiting | None:
        lim = self.config.limits.get(name)
        if lim is None:  # a limit taken out of the fleet file no longer holds anything back
            return None
        why = self._slots(gate, lim.concurrency, now_ms, more)
        if why is not None:
            return why
        for rate, counted in ((lim.rate, False), (lim.tokens, True)):
            if rate is None:
                continue
            room_at = self._room_at(gate, rate, counted, now_ms, more)
            if room_at is not None:
                what = "tokens" if counted else "starts"
                return Waiting(f"waits for limit {name!r} ({rate} {what}; room again at {_utc(room_at)})", room_at)
        return None

    def _room_at(self, gate: str, rate: Rate, tokens: bool, now_ms: int, more: int = 1) -> int | None:
        """None when the window ending now has room (for ``more`` starts; tokens are counted
        once a step reports them, so a start adds none); else when it will. Every row after
        the window's start counts, a later one too (a worker whose clock is behind)."""
        since = now_ms - rate.window_ms
        if gate not in self.horizons:
            self.horizons[gate] = self.load_horizon(gate) if self.load_horizon is not None else None
        horizon = self.horizons[gate]
        if horizon is not None and since < horizon:  # this clock is so far behind that its window
            return horizon + rate.window_ms + 1     # reaches rows already forgotten: it cannot count
        key = (gate, rate.window_ms)
        if key not in self.totals:
            if self.load_totals is not None:
                self.totals[key] = list(self.load_totals(gate, since))
            else:
                rows = self.load_window(gate, since)
                self.totals[key] = [sum(n for _, n, _ in rows), sum(t for _, _, t in rows)]
            self.window_ms[gate] = max(self.window_ms.get(gate, 0), rate.window_ms)
        count, used_tokens = self.totals[key]
        used = used_tokens if tokens else count
        if used + (0 if tokens else more - 1) < rate.amount:
            return None
        rows = sorted([*self.load_window(gate, since), *self.windows.get(gate, [])])
        for at_ms, n, t in rows:  # the oldest leave the window first
            used -= t if tokens else n
            if used + (0 if tokens else more - 1) < rate.amount:
                return at_ms + rate.window_ms + 1
        return now_ms + rate.window_ms

    def _tenant(self, name: str, gate: str, now_ms: int, more: int = 1) -> Waiting | None:
        share = self.config.tenants.get(name)
        if share is None:
            return None
        why = self._slots(gate, share.concurrency, now_ms, more)
        if why is not None:
            return why
        if share.daily_tokens is None and share.daily_usd is None:
            return None
        day = now_ms // DAY_MS
        if (name, day) not in self.spent:
            self.spent[(name, day)] = self.load_spent(name, day)
        tokens, usd = self.spent[(name, day)]
        next_day = (day + 1) * DAY_MS
        tail = f"parked until {_utc(next_day)} or an operator raises it (statewright limits apply)"
        if share.daily_tokens is not None and tokens >= share.daily_tokens:
            return Waiting(f"tenant {name!r} spent its daily token budget ({tokens:,} of {share.daily_tokens:,}); "
                           f"{tail}", next_day, f"budget:{name}")
        if share.daily_usd is not None and usd >= share.daily_usd:
            return Waiting(f"tenant {name!r} spent its daily money budget (${usd:,.2f} of ${share.daily_usd:,.2f}); "
                           f"{tail}", next_day, f"budget:{name}")
        return None


def _what(gate: str) -> str:
    kind, _, name = gate.partition(":")
    return f"{kind} {name!r}"


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def by_set(claimed: Sequence[tuple[Gate, ...]]) -> tuple[dict[int, int], dict[int, tuple[Gate, ...]]]:
    """Commands' gates (one tuple per set: ``claim_gates``) by set, keyed by identity: how
    many commands have each, and the set itself."""
    count: dict[int, int] = {}
    distinct: dict[int, tuple[Gate, ...]] = {}
    for gates in claimed:
        key = id(gates)
        if key in count:
            count[key] += 1
        else:
            count[key] = 1
            distinct[key] = gates
    return count, distinct


@lru_cache(maxsize=1024)
def claim_gates(text: str | None, tenant: str, gating: bool) -> tuple[Gate, ...]:
    """The gates a claim passes: its command's (``text``, the column), with its tenant's
    when the tenant has a limit or a budget (made once per distinct text and tenant)."""
    gates = gates_of(text)
    return (*gates, Gate(f"tenant:{tenant}")) if gating and tenant else gates


def usage_gates(gates: Sequence[str], config: FleetConfig) -> Mapping[str, bool]:
    """Which of an admitted command's gates count its tokens: named limits with a token
    rate (their rate log row) and tenants with a budget (their day's usage)."""
    out = {}
    for g in gates:
        kind, _, name = g.partition(":")
        if kind == "limit":
            lim = config.limits.get(name)
            out[g] = lim is not None and lim.tokens is not None
        elif kind == "tenant":
            share = config.tenants.get(name)
            out[g] = share is not None and (share.daily_tokens is not None or share.daily_usd is not None)
    return out


__all__ = [
    "CONCURRENCY_RECHECK_MS",
    "Gate",
    "Ledger",
    "Waiting",
    "by_set",
    "claim_gates",
    "gates_json",
    "gates_of",
    "slots_in_use",
    "usage_gates",
]
