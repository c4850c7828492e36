"""Property: an admission that decides on its gates' bounds (at most how many live slots
each has, ``sw_slot_bounds``) decides exactly as one that counts the live slots: the same
commands start, the same wait, for the same reason. The bounds it leaves are never below
the live slots, counted or not, so the next admission may decide on them too."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statewright.definition.fleet import FleetConfig
from statewright.store.admission import Gate, Ledger

from .test_admission_together import NOW_MS, ledger, situations

NAMES = ["workflow:w", "step:w/a", "step:w/b", "limit:api", "limit:db", "tenant:t1", "tenant:t2", "tenant:t3"]


def admit(book: Ledger, claimed: list[tuple[Gate, ...]]) -> list[Any]:
    """What the store's admission does: all at once where they fit, else each in turn;
    per command, what it took or why it waits."""
    taken = book.take_all(claimed, NOW_MS)
    if taken is not None:
        return [taken[id(gates)] for gates in claimed]
    out: list[Any] = []
    for gates in claimed:
        why = book.check(gates, NOW_MS)
        out.append(why if why is not None else book.take(gates, NOW_MS))
    return out


@settings(max_examples=400, deadline=None)
@given(situations(), st.data())
def test_deciding_on_bounds_is_deciding_on_the_count(
    situation: tuple[FleetConfig, dict[str, int], dict[str, int], list[tuple[Gate, ...]]], data: Any,
) -> None:
    config, in_use, started, claimed = situation
    # Each gate's bound is its live slots or more, read ahead with the admission, read when
    # first needed, or missing (never bounded).
    bounds = {n: in_use.get(n, 0) + data.draw(st.integers(0, 4)) for n in NAMES}
    how = {n: data.draw(st.sampled_from(["ahead", "later", "missing"])) for n in NAMES}
    counts: list[int] = []

    def load_in_use() -> dict[str, int]:
        counts.append(1)
        return dict(in_use)

    counted = ledger(config, in_use, started)
    bounded = ledger(config, {n: b for n, b in bounds.items() if how[n] == "ahead"}, started)
    bounded.load_in_use = load_in_use
    bounded.load_bound = lambda gate: bounds[gate] if how.get(gate) == "later" else None

    assert admit(bounded, claimed) == admit(counted, claimed)
    assert len(counts) <= 1  # counted once at most, whatever the number of gates
    live = counted.in_use  # the live slots after the admission: before it, and what it took
    left = {**{n: b for n, b in bounds.items() if how[n] != "missing"}, **bounded.bounds()}
    for gate in bounded.checked:
        assert left[gate] >= live.get(gate, 0)
