"""Property: with several workers (threads, each with its own store connection) claiming
from one database, no concurrency limit and no rate limit is ever exceeded. Time is a
shared clock the workers move forward as they go (no wall-clock sleeps)."""

from __future__ import annotations

import random
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from statewright.definition.fleet import FleetConfig, NamedLimit, parse_rate
from statewright.definition.loader import workflow_from_dict
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.store import open_store
from store.backends import BACKENDS

LEASE_MS = 10**12  # never expires on the test's clock: a slot is freed only by finishing
RATE_WINDOW_MS = 1_000


class SharedClock:
    """Milliseconds that only move forward, by what each worker asks."""

    def __init__(self) -> None:
        self._now = 1_700_000_000_000
        self._lock = threading.Lock()

    def tick(self, ms: int) -> int:
        with self._lock:
            self._now += ms
            return self._now


class Observed:
    """What the workers saw: the most steps under each gate at once, and every start's time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.starts: list[int] = []
        self.finished = 0

    def start(self, gates: tuple[str, ...], at_ms: int, rated: bool) -> None:
        with self.lock:
            for g in gates:
                self.running[g] = self.running.get(g, 0) + 1
                self.most[g] = max(self.most.get(g, 0), self.running[g])
            if rated:
                self.starts.append(at_ms)

    def finish(self, gates: tuple[str, ...]) -> None:
        with self.lock:
            for g in gates:
                self.running[g] -= 1
            self.finished += 1


def most_in_any_window(starts: list[int], window_ms: int) -> int:
    """The most starts in any window (s - window, s]."""
    starts = sorted(starts)
    return max((sum(1 for t in starts if s - window_ms < t <= s) for s in starts), default=0)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(
    step_cap=st.integers(1, 3), limit_cap=st.integers(1, 4), rate=st.integers(1, 4), tasks=st.integers(4, 12),
    workers=st.integers(2, 4), seed=st.integers(0, 2**32 - 1),
)
def test_no_limit_is_exceeded_by_several_workers(
    store_url: str, tmp_path: Path, step_cap: int, limit_cap: int, rate: int, tasks: int, workers: int, seed: int,
) -> None:
    """Steps under a step concurrency, a named limit's concurrency and its rate, claimed by
    several workers at once: at no moment do more run than each concurrency allows, no
    window of the rate's length holds more starts than the rate, and every step runs."""
    tag = uuid.uuid4().hex[:8]
    limit = f"api-{tag}"
    clock = SharedClock()
    engine = Engine.open(store_url, workspace_root=tmp_path / "ws", clock=FakeClock(clock.tick(0)))
    try:
        engine.store.put_fleet(FleetConfig(limits={limit: NamedLimit(
            limit, concurrency=limit_cap, rate=parse_rate(f"{rate}/s"))}), clock.tick(0))
        wf = workflow_from_dict({"workflow": f"w-{tag}", "steps": [
            {"id": "work", "kind": "code", "owner": "t", "concurrency": step_cap, "limits": [limit],
             "run": {"callable": "fleet.fl_steps:record"}}]})
        for i in range(tasks):
            engine.submit(wf, {"n": i})
    finally:
        engine.close()
    seen = Observed()
    errors: list[BaseException] = []
    barrier = threading.Barrier(workers)

    def work(n: int) -> None:
        rng = random.Random(seed + n)
        store = open_store(store_url)
        held: list[tuple[str, int, tuple[str, ...]]] = []
        try:
            barrier.wait()
            for _ in range(5_000):
                if seen.finished >= tasks and not held:
                    return
                if held and (rng.random() < 0.5 or len(held) >= 3):
                    command_id, token, gates = held.pop(rng.randrange(len(held)))
                    seen.finish(gates)
                    store.ack(command_id, token)
                    store.wake(gates, clock.tick(0))
                    continue
                now = clock.tick(rng.choice([0, 50, 200, 400]))
                for c in store.claim(f"w{n}", now, LEASE_MS, rng.randint(1, 3)):
                    seen.start(c.gates, now, f"limit:{limit}" in c.gates)
                    held.append((c.command_id, c.token, c.gates))
                if seen.finished >= tasks and not held:
                    return
                if not held:
                    clock.tick(2_000)  # nothing to do: let the waiters' time come
            raise AssertionError(f"worker {n} still had work after 5000 rounds")
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert seen.finished == tasks
    assert seen.most[f"step:w-{tag}/work"] <= step_cap
    assert seen.most[f"limit:{limit}"] <= limit_cap
    assert most_in_any_window(seen.starts, RATE_WINDOW_MS) <= rate
