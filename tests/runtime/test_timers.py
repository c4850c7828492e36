"""Timers are durable rows: they survive closing the engine, fire once when the (fake)
clock reaches them, and never before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from people.support import People
from statewright._errors import ApprovalError
from statewright.machine.state import Outcome, TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task

from .support import STEPS, code, drain, lines, workflow

EVERY_SECONDS = 300

WAIT_CI = workflow(
    "wait-then-deploy",
    {"id": "wait-ci", "kind": "wait", "owner": "ops", "check": {"callable": f"{STEPS}:flag_exists"},
     "every": "5m", "max_checks": 3},
    code("deploy", "record"),
)


def approval_workflow(on_failure: object = "halt") -> object:
    return workflow(
        "expiring-approval",
        code("draft", "record"),
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"},
         "expires_after": "1h", "on_failure": on_failure},
        code("ship", "record"),
    )


def types(engine: Engine, tid: str) -> list[str]:
    return [e.type for e in engine.store.events(tid)]


def test_a_wait_timer_survives_a_restart_and_fires_exactly_once(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    """Check 1 fails and schedules a timer row; after a restart the timer does not fire
    early, fires once when due, and the next check runs."""
    first = open_engine(clock=clock)
    tid = first.submit(WAIT_CI, {"workspace": str(workspace)})
    drain(first)
    submitted_at = first.state(tid).created_at_ms
    assert first.state(tid).status is TaskStatus.WAITING
    assert first.store.timers(tid) == [{
        "timer_id": f"{tid}/wait-ci/1/timer-1", "task_id": tid,
        "due_at_ms": submitted_at + EVERY_SECONDS * 1000, "purpose": "wait_check",
    }]
    first.close()

    engine = open_engine(clock=clock)  # a new process would see exactly this
    clock.advance(EVERY_SECONDS - 1)
    assert drain(engine).timers == 0
    assert engine.state(tid).status is TaskStatus.WAITING

    (workspace / "flag").touch()
    clock.advance(1)
    stats = drain(engine)

    assert stats.timers == 1
    assert drain(engine).timers == 0
    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    assert types(engine, tid) == [
        "TaskSubmitted", "CheckReported", "TimerFired", "CheckReported", "AttemptReported",
    ]
    assert lines(workspace / "wait-ci.calls") == [f"{tid}/wait-ci/1/check-1", f"{tid}/wait-ci/1/check-2"]
    assert st.attempts[0].checks == 2
    assert engine.store.timers() == []
    assert verify_task(engine, tid) == []


def test_a_wait_step_that_never_passes_spends_its_checks_then_fails(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    """max_checks counts checks, not time: 3 checks, 2 timers, then wait_exhausted."""
    engine = open_engine(clock=clock)
    tid = engine.submit(WAIT_CI, {"workspace": str(workspace)})
    fired = 0
    for _ in range(5):
        fired += drain(engine).timers
        clock.advance(EVERY_SECONDS)
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED and st.halt is not None
    assert st.halt.reason == "wait_exhausted"
    assert fired == 2
    assert types(engine, tid).count("CheckReported") == 3


def test_an_approval_expiry_timer_survives_a_restart_and_routes_approval_expired(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    """Nobody approves within 1h: after a restart the expiry timer fires once and the
    step fails with approval_expired (default route: halt)."""
    first = open_engine(clock=clock)
    alice = People(first).add("alice", "maintainer")
    tid = first.submit(approval_workflow(), {"workspace": str(workspace)})
    drain(first)
    st = first.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL and st.current is not None
    [timer] = first.store.timers(tid)
    assert timer["purpose"] == "approval_expiry" and timer["due_at_ms"] == st.current.expires_at_ms
    first.close()

    engine = open_engine(clock=clock)
    clock.advance(3599)
    assert drain(engine).timers == 0
    clock.advance(1)
    assert drain(engine).timers == 1

    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED and st.halt is not None
    assert (st.halt.step, st.halt.reason) == ("approve", "approval_expired")
    last = st.attempts[-1]
    assert (last.step, last.outcome, last.actor) == ("approve", Outcome.FAILED, "timer:expiry")
    assert types(engine, tid).count("TimerFired") == 1
    assert engine.store.timers() == []
    with pytest.raises(ApprovalError, match="is halted; nothing waits for an approval"):
        engine.approve(tid, alice, proposal_hash="ab" * 32)


def test_an_expired_approval_loops_back_and_the_next_proposal_can_be_approved(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    """on_failure: loop_back sends the task back to draft; the new approval gets its own
    expiry timer, and approving in time completes the task."""
    engine = open_engine(clock=clock)
    alice = People(engine).add("alice", "maintainer")
    tid = engine.submit(approval_workflow({"loop_back": "draft", "max_attempts": 2}), {"workspace": str(workspace)})
    drain(engine)
    clock.advance(3600)
    drain(engine)

    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL and st.current is not None
    assert (st.current.step, st.current.attempt) == ("approve", 2)
    assert lines(workspace / "draft.calls") == [f"{tid}/draft/1", f"{tid}/draft/2"]
    assert [t["timer_id"] for t in engine.store.timers(tid)] == [f"{tid}/approve/2/expiry"]

    engine.approve(tid, alice, proposal_hash=st.current.proposal_hash)
    drain(engine)
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert engine.store.timers() == []


def test_an_approval_after_the_deadline_is_refused_even_before_the_timer_fires(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    """The deadline is in the state, so a late approval loses to the expiry whichever
    a worker gets to first."""
    engine = open_engine(clock=clock)
    alice = People(engine).add("alice", "maintainer")
    tid = engine.submit(approval_workflow(), {"workspace": str(workspace)})
    drain(engine)
    clock.advance(3600)
    before = engine.state(tid).to_dict()
    shown = engine.state(tid).current
    assert shown is not None

    with pytest.raises(ApprovalError, match="approval window closed"):
        engine.approve(tid, alice, proposal_hash=shown.proposal_hash)

    assert engine.state(tid).to_dict() == before
    drain(engine)
    assert engine.state(tid).status is TaskStatus.HALTED


def test_a_timer_held_by_a_worker_that_died_fires_once_after_its_lease(
    open_engine: Callable[..., Engine], clock: FakeClock, workspace: Path,
) -> None:
    """A worker claims the due timer and dies; the timer row comes back when the lease
    ends and fires once."""
    engine = open_engine(clock=clock)
    tid = engine.submit(WAIT_CI, {"workspace": str(workspace)})
    drain(engine)
    clock.advance(EVERY_SECONDS)
    [held] = engine.store.claim_timers("dead-worker", clock.now_ms(), 10_000)
    assert held.token == 1
    assert drain(engine).timers == 0  # leased: nobody else may fire it

    clock.advance(10)
    assert drain(engine).timers == 1
    assert types(engine, tid).count("TimerFired") == 1
    assert engine.state(tid).status is TaskStatus.WAITING  # check 2 ran and failed: timer 2
    assert [t["timer_id"] for t in engine.store.timers(tid)] == [f"{tid}/wait-ci/1/timer-2"]
