"""What a grant admits by itself (store/grants.py, ``Grant.need`` then ``Grant.spend``):
all of a claim's commands or none, and only from rooms that are there, alive, made for the
capacities the commands name, and large enough."""

from __future__ import annotations

from typing import Any

from statewright.store.admission import Gate
from statewright.store.grants import Grant, Room

T0 = 1_000_000
STEP = (Gate("step:wf/s", 10), Gate("limit:api"))
OTHER = (Gate("step:wf/s", 10), Gate("tenant:acme"))


def take(g: Grant, claimed: list[tuple[Gate, ...]], now_ms: int) -> bool:
    """What a claim does with its grant: what its commands need, then spent, or False."""
    need = g.need(claimed)
    return need is not None and g.spend(need, now_ms)


def grant(slots: int = 4, starts: int | None = 4, made_ms: int = T0, expires_ms: int = T0 + 1_000) -> Grant:
    return Grant(1, {
        "step:wf/s": Room(frozenset({10}), slots, None, made_ms, expires_ms),
        "limit:api": Room(frozenset({0}), None, starts, made_ms, expires_ms),
    })


def left(g: Grant) -> dict[str, tuple[int | None, int | None]]:
    return {name: (room.slots, room.starts) for name, room in g.rooms.items()}


def test_a_claim_the_rooms_cover_is_taken_from_each_room_its_commands_pass() -> None:
    g = grant()
    assert take(g, [STEP, STEP, STEP], T0 + 10)
    assert left(g) == {"step:wf/s": (1, None), "limit:api": (None, 1)}
    assert take(g, [STEP], T0 + 20)
    assert left(g) == {"step:wf/s": (0, None), "limit:api": (None, 0)}


def test_a_claim_that_needs_more_than_a_room_has_left_takes_nothing() -> None:
    g = grant(slots=4, starts=2)
    assert not take(g, [STEP, STEP, STEP], T0 + 10)
    assert left(g) == {"step:wf/s": (4, None), "limit:api": (None, 2)}  # not the slots either


def test_a_gate_with_no_room_or_another_capacity_sends_the_claim_to_an_admission() -> None:
    g = grant()
    assert not take(g, [STEP, OTHER], T0 + 10)  # no room for tenant:acme
    assert not take(g, [(Gate("step:wf/s", 20),)], T0 + 10)  # the room was made for a capacity of 10
    assert left(g) == {"step:wf/s": (4, None), "limit:api": (None, 4)}


def test_a_room_admits_only_from_its_making_until_its_end() -> None:
    g = grant()
    assert not take(g, [STEP], T0 - 1)
    assert not take(g, [STEP], T0 + 1_000)
    assert take(g, [STEP], T0 + 999)


def test_a_grant_is_live_from_its_first_room_to_the_end_of_its_last() -> None:
    older = grant(made_ms=T0, expires_ms=T0 + 1_000)
    newer = Grant(1, {"tenant:acme": Room(frozenset({0}), 8, None, T0 + 500, T0 + 1_500)})
    both = older.with_rooms(newer)
    assert [both.live(t) for t in (T0 - 1, T0, T0 + 1_499, T0 + 1_500)] == [False, True, True, False]
    assert take(both, [OTHER], T0 + 600)  # the step's room from the older grant, the tenant's from the newer
    assert not take(both, [OTHER], T0 + 1_200)  # the step's room has ended
    assert not Grant(1, {}).live(T0)


def test_claims_on_threads_at_once_never_spend_more_than_a_room_holds() -> None:
    """A worker's claiming threads share its grant: however their spends interleave (a
    thread switch as often as the interpreter allows), they take exactly what the rooms
    hold, never more."""
    import sys
    import threading

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            g = grant(slots=20_000, starts=20_000)
            need = g.need([STEP])
            assert need is not None
            taken = [0] * 8

            def spend(i: int, g: Grant = g, need: Any = need, taken: list[int] = taken) -> None:
                while g.spend(need, T0 + 1):
                    taken[i] += 1

            threads = [threading.Thread(target=spend, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sum(taken) == 20_000
            assert left(g) == {"step:wf/s": (0, None), "limit:api": (None, 0)}
    finally:
        sys.setswitchinterval(before)
