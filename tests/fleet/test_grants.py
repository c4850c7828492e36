"""Grants (store/grants.py): a worker whose admission finds every gate far from its limits
sets some room aside, and admits its next claims from it with no admission; the room is
counted by every other worker first, so no limit is exceeded. On the SQL backends, where
admission is a transaction of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statewright.definition.fleet import FleetConfig, NamedLimit, parse_rate
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.store.grants import GRANT_MS
from store.backends import SQL_BACKENDS, raw_sql

LEASE_MS = 600_000

pytestmark = pytest.mark.parametrize("backend", SQL_BACKENDS)


def workflow(name: str, **step: Any) -> Workflow:
    body = {"id": "work", "kind": "code", "owner": "tests", "run": {"callable": "fleet.fl_steps:record"}, **step}
    return workflow_from_dict({"workflow": name, "steps": [body]}, f"<{name}>")


def rate_log(url: str) -> list[tuple[str, int, int]]:
    return sorted((str(c), int(a), int(n)) for c, a, n in raw_sql(
        url, "SELECT command_id, at_ms, starts FROM sw_rate_log WHERE command_id <> ''"))


def bounds(url: str) -> dict[str, int]:
    return {str(g): int(n) for g, n in raw_sql(url, "SELECT gate, at_most FROM sw_slot_bounds")}


def live_slots(url: str) -> int:
    return int(raw_sql(url, "SELECT COUNT(*) FROM sw_outbox WHERE lease_expires_ms IS NOT NULL"
                            " AND slot_token = token")[0][0])


def test_claims_from_a_grant_read_and_write_no_admission(
    store_url: str, open_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """The first claim's admission sets room aside (the slots in the bound and in
    sw_grants, the starts in a rate log row dated at the grant's end); the next claims
    take from it: no rate log row, no bound changes, and they hold their slots."""
    clock = FakeClock()
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", concurrency=1000,
                                                                 rate=parse_rate("1000/min"))}), clock.now_ms())
    wf = workflow("granted", limits=["api"])
    for i in range(24):
        engine.submit(wf, {"n": i})
    first = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8)
    assert len(first) == 8
    log, bound = rate_log(store_url), bounds(store_url)
    grant_row = [r for r in log if r[0].startswith("grant:")]
    assert grant_row and grant_row[0][1] == clock.now_ms() + GRANT_MS and grant_row[0][2] > 8
    assert bound["limit:api"] > 8
    assert raw_sql(store_url, "SELECT gate, amount FROM sw_grants") == [("limit:api", bound["limit:api"] - 8)]
    more = engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8) + engine.store.claim("w1", clock.now_ms(),
                                                                                        LEASE_MS, 8)
    assert len(more) == 16 and all(c.gates == ("limit:api",) for c in more)
    assert rate_log(store_url) == log and bounds(store_url) == bound
    assert live_slots(store_url) == 24


def test_what_a_grant_sets_aside_no_other_worker_takes(
    store_url: str, open_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """Worker A's grant holds 8 slots of a concurrency of 40. Worker B's admission, which
    counts the slots one by one where the bound leaves no room, counts them too: it starts
    24, not 32, and when A starts 8 from its grant, 40 run, not 48."""
    clock = FakeClock()
    a = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    b = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    a.store.put_fleet(FleetConfig(), clock.now_ms())
    wf = workflow("shared", concurrency=40)
    for i in range(60):
        a.submit(wf, {"n": i})
    assert len(a.store.claim("a", clock.now_ms(), LEASE_MS, 8)) == 8
    assert raw_sql(store_url, "SELECT gate, amount FROM sw_grants") == [("step:shared/work", 8)]
    assert len(b.store.claim("b", clock.now_ms(), LEASE_MS, 60)) == 24
    for i in range(8):
        a.submit(wf, {"n": 100 + i})
    assert len(a.store.claim("a", clock.now_ms(), LEASE_MS, 8)) == 8
    assert live_slots(store_url) == 40
    assert b.store.claim("b", clock.now_ms(), LEASE_MS, 8) == []


def test_a_fleet_put_or_the_grants_end_sends_claims_through_an_admission(
    store_url: str, open_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """A grant admits nothing once its time is up, nor once a fleet config is put (which
    may lower a limit): a concurrency lowered to 8 holds at once."""
    clock = FakeClock()
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    limits = {"api": NamedLimit("api", concurrency=1000, rate=parse_rate("1000/min"))}
    engine.store.put_fleet(FleetConfig(limits=limits), clock.now_ms())
    wf = workflow("ended", limits=["api"])
    for i in range(40):
        engine.submit(wf, {"n": i})
    assert len(engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8)) == 8
    rows = len(rate_log(store_url))
    clock.advance(GRANT_MS / 1000)
    assert len(engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8)) == 8
    assert len(rate_log(store_url)) > rows  # admitted again: its starts logged, a new grant
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", concurrency=8)}), clock.now_ms())
    assert raw_sql(store_url, "SELECT COUNT(*) FROM sw_grants")[0][0] == 0
    assert engine.store.claim("w1", clock.now_ms(), LEASE_MS, 8) == []
    assert live_slots(store_url) == 16


def test_claims_alike_spend_the_grant_each_until_it_has_too_little_left(
    store_url: str, open_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """Claims whose rows pass the same gates are worked out once per grant, and each spends
    from it: once it has too little left for the next, that one goes through an admission,
    and the slots held never pass the grant and what its admission admitted."""
    clock = FakeClock()
    engine = open_engine(clock=clock, workspace_root=tmp_path / "ws")
    engine.store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", concurrency=64)}), clock.now_ms())
    wf = workflow("alike", limits=["api"])
    for i in range(40):
        engine.submit(wf, {"n": i})
    assert len(engine.store.claim("w1", clock.now_ms(), LEASE_MS, 2)) == 2
    [(granted,)] = raw_sql(store_url, "SELECT amount FROM sw_grants WHERE gate = 'limit:api'")
    bound = bounds(store_url)
    for i in range(int(granted) // 2):
        assert len(engine.store.claim("w1", clock.now_ms(), LEASE_MS, 2)) == 2
        assert bounds(store_url) == bound, f"claim {i + 1} of the grant went through an admission"
    assert live_slots(store_url) == 2 + int(granted) // 2 * 2
    assert len(engine.store.claim("w1", clock.now_ms(), LEASE_MS, 2)) == 2
    assert bounds(store_url) != bound  # the grant had too little left: admitted, and granted again


@pytest.mark.parametrize(("concurrency", "rate", "most"), [(64, "100000/min", 64), (100000, "100/min", 100)])
def test_several_workers_taking_grants_never_exceed_a_limit(
    store_url: str, open_engine: Callable[..., Engine], tmp_path: Path, concurrency: int, rate: str, most: int
) -> None:
    """Four workers, each its own store, claim batches of 8 at once on one clock until
    nothing more starts; no step ends. Every one of them takes grants. As many start as the
    step's concurrency, or the limit's start rate, allows: never more."""
    clock = FakeClock()
    engines = [open_engine(clock=clock, workspace_root=tmp_path / "ws") for _ in range(4)]
    engines[0].store.put_fleet(FleetConfig(limits={"api": NamedLimit("api", rate=parse_rate(rate))}),
                               clock.now_ms())
    wf = workflow("many", concurrency=concurrency, limits=["api"])
    for i in range(most + 60):
        engines[0].submit(wf, {"n": i})
    started: list[int] = []
    granted: list[bool] = []
    lock = threading.Lock()

    def work(engine: Engine, name: str) -> None:
        idle = 0
        while idle < 3:
            got = engine.store.claim(name, clock.now_ms(), LEASE_MS, 8)
            idle = 0 if got else idle + 1
            with lock:
                started.append(len(got))
                granted.append(getattr(engine.store, "_grant", None) is not None)

    threads = [threading.Thread(target=work, args=(e, f"w{i}")) for i, e in enumerate(engines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert any(granted)
    assert sum(started) <= most
    assert live_slots(store_url) == sum(started)
    # The rate log counts every start: each admitted's own, or its grant's row.
    assert int(raw_sql(store_url, "SELECT COALESCE(SUM(starts), 0) FROM sw_rate_log")[0][0]) >= sum(started)
