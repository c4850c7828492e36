"""Property: a claim's commands admitted together (``Ledger.take_all``, one decision per set
of gates) get exactly what each would get admitted in turn (``check`` then ``take``, one
command after the other). take_all declines, counting nothing, whenever one of them would
wait, and otherwise only where definitions give one gate different capacities."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statewright.definition.fleet import FleetConfig, NamedLimit, Rate, TenantShare
from statewright.store.admission import Gate, Ledger, claim_gates, gates_json

NOW_MS = 1_700_000_000_000
WINDOW_MS = 60_000
GATE_SETS = [  # (the command's gates column, its tenant); the tenant's gate comes from the config
    ([Gate("workflow:w", 9), Gate("step:w/a", 6), Gate("limit:api")], "t1"),
    ([Gate("workflow:w", 9), Gate("step:w/b", 4), Gate("limit:api")], "t2"),
    ([Gate("workflow:w", 10), Gate("limit:db")], "t1"),
    ([Gate("limit:db"), Gate("limit:api")], "t3"),
    ([], "t2"),
]

caps = st.one_of(st.none(), st.integers(0, 14))
rates = st.one_of(st.none(), st.integers(1, 16).map(lambda n: Rate(n, WINDOW_MS, f"{n}/min")))


@st.composite
def situations(draw: Any) -> tuple[FleetConfig, dict[str, int], dict[str, int], list[tuple[Gate, ...]]]:
    limits = {n: NamedLimit(n, draw(caps), draw(rates)) for n in ("api", "db") if draw(st.booleans())}
    tenants = {t: TenantShare(t, 1, draw(caps)) for t in ("t1", "t2", "t3") if draw(st.booleans())}
    config = FleetConfig(limits, tenants)
    names = ["workflow:w", "step:w/a", "step:w/b", "limit:api", "limit:db", "tenant:t1", "tenant:t2", "tenant:t3"]
    in_use = {n: draw(st.integers(0, 3)) for n in names if draw(st.booleans())}
    started = {f"limit:{n}": draw(st.integers(0, 8)) for n in ("api", "db")}
    picks = draw(st.lists(st.sampled_from(range(len(GATE_SETS))), min_size=1, max_size=8))
    claimed = []
    for i in picks:
        gates, tenant = GATE_SETS[i]
        share = tenants.get(tenant)
        claimed.append(claim_gates(gates_json(gates), tenant, share is not None and share.concurrency is not None))
    return config, in_use, started, [c for c in claimed if c]


def ledger(config: FleetConfig, in_use: dict[str, int], started: dict[str, int]) -> Ledger:
    """A ledger over a rate log holding ``started`` starts per limit, inside the window."""
    def window(gate: str, since: int) -> list[tuple[int, int, int]]:
        return [(NOW_MS - 1_000 - i, 1, 0) for i in range(started.get(gate, 0))]

    return Ledger(config, dict(in_use), window, lambda tenant, day: (0, 0.0),
                  lambda gate, since: (started.get(gate, 0), 0), lambda gate: None)


@settings(max_examples=400, deadline=None)
@given(situations())
def test_commands_admitted_together_get_what_each_would_get_in_turn(
    situation: tuple[FleetConfig, dict[str, int], dict[str, int], list[tuple[Gate, ...]]],
) -> None:
    config, in_use, started, claimed = situation
    one_by_one = ledger(config, in_use, started)
    in_turn = []
    for gates in claimed:
        if one_by_one.check(gates, NOW_MS) is None:
            in_turn.append(one_by_one.take(gates, NOW_MS))
        else:
            in_turn.append(None)

    together = ledger(config, in_use, started)
    taken = together.take_all(claimed, NOW_MS)
    capacities: dict[str, set[int]] = {}
    for gates in claimed:
        for g in gates:
            capacities.setdefault(g.name, set()).add(g.capacity)
    if taken is None:
        assert None in in_turn or any(len(c) > 1 for c in capacities.values())
        assert together.in_use == in_use  # declined: nothing counted
        assert together.windows == {}
    else:
        assert None not in in_turn
        assert [taken[id(gates)] for gates in claimed] == in_turn
        assert together.in_use == one_by_one.in_use
        assert together.totals == one_by_one.totals
        assert starts_of(together) == starts_of(one_by_one)


def starts_of(book: Ledger) -> dict[str, list[tuple[int, int]]]:
    """Per gate, the starts an admission added to its rate log, one (time, tokens) each:
    one row may count several."""
    return {g: sorted((at, t) for at, n, t in rows for _ in range(n)) for g, rows in book.windows.items()}
