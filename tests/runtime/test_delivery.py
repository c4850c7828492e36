"""At-least-once delivery: duplicate events, reordered reports, redelivered commands and
late reports under an old fencing token change nothing they should not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from people.support import People
from statewright._errors import IllegalEventError, StaleLeaseError
from statewright.machine.events import ApprovalGranted, AttemptReported, CheckReported, TimerFired
from statewright.machine.state import TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine

from .support import STEPS, code, drain, lines, snapshot, workflow

TWO_STEPS = workflow("two-steps", code("a", "record"), code("b", "record"))


def report(cid: str, step: str, *, at_ms: int, event_id: str | None = None) -> AttemptReported:
    return AttemptReported(
        event_id=event_id or f"{cid}:result", at_ms=at_ms, command_id=cid, step=step, attempt=1,
        actor=f"code:{step}", ok=True,
    )


@pytest.fixture
def engine(open_engine: Callable[..., Engine], clock: FakeClock) -> Engine:
    return open_engine(clock=clock)


def test_a_duplicate_event_is_recorded_once_and_returns_the_same_result(
    engine: Engine, clock: FakeClock, db: Path, workspace: Path,
) -> None:
    """The same event id delivered twice: one event row, the same state both times."""
    tid = engine.submit(TWO_STEPS, {"workspace": str(workspace)})
    [claim] = engine.store.claim("w1", clock.now_ms(), 30_000)
    event = report(claim.command_id, "a", at_ms=clock.now_ms())

    first = engine.apply(tid, event, complete=(claim.command_id, claim.token))
    after_first = snapshot(db)
    second = engine.apply(tid, event, complete=(claim.command_id, claim.token))
    third = engine.apply(tid, event)

    assert not first.duplicate
    assert second.duplicate and third.duplicate
    assert second.state.to_dict() == first.state.to_dict() == third.state.to_dict()
    assert second.commands == [] and third.commands == []
    assert snapshot(db) == after_first
    assert [e.event_id for e in engine.store.events(tid)].count(event.event_id) == 1


def test_a_duplicate_approval_is_recorded_once(
    engine: Engine, clock: FakeClock, db: Path, workspace: Path,
) -> None:
    """An approval delivered twice (a retried HTTP request) approves once."""
    People(engine).add("alice", "maintainer")
    wf = workflow(
        "gate", code("build", "record"),
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
        code("ship", "record"),
    )
    tid = engine.submit(wf, {"workspace": str(workspace)})
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL and st.current is not None
    grant = ApprovalGranted(
        event_id=f"{tid}:approve:req-1", at_ms=clock.now_ms(), step="approve", actor="alice",
        roles=("maintainer",), proposal_hash=st.current.proposal_hash,
    )
    first = engine.apply(tid, grant)
    after_first = snapshot(db)
    second = engine.apply(tid, grant)

    assert second.duplicate and second.state.to_dict() == first.state.to_dict()
    assert snapshot(db) == after_first
    assert len(engine.state(tid).approvals) == 1


def test_a_report_from_an_old_command_after_the_task_moved_on_is_refused(
    engine: Engine, clock: FakeClock, db: Path, workspace: Path,
) -> None:
    """Reordered delivery: a's report (under another event id) arrives when b is in flight."""
    tid = engine.submit(TWO_STEPS, {"workspace": str(workspace)})
    [claim] = engine.store.claim("w1", clock.now_ms(), 30_000)
    engine.apply(tid, report(claim.command_id, "a", at_ms=clock.now_ms()), complete=(claim.command_id, claim.token))
    before = snapshot(db)
    state_before = engine.state(tid).to_dict()

    late = report(claim.command_id, "a", at_ms=clock.now_ms(), event_id=f"{claim.command_id}:late")
    with pytest.raises(IllegalEventError, match="does not match the command in flight"):
        engine.apply(tid, late)

    assert engine.state(tid).to_dict() == state_before
    assert snapshot(db) == before


def test_an_old_check_report_and_an_old_timer_are_refused(
    engine: Engine, clock: FakeClock, db: Path, workspace: Path,
) -> None:
    """Reordered delivery on a wait step: check 1's report and timer 1 arriving after
    the step is on check 2 change nothing."""
    wf = workflow("ci", {
        "id": "wait-ci", "kind": "wait", "owner": "ops", "check": {"callable": f"{STEPS}:flag_exists"},
        "every": "1m", "max_checks": 5,
    })
    tid = engine.submit(wf, {"workspace": str(workspace)})
    drain(engine)  # check 1 fails, timer 1 set
    clock.advance(60)
    drain(engine)  # timer 1 fires, check 2 fails, timer 2 set
    st = engine.state(tid)
    assert st.status is TaskStatus.WAITING and st.current is not None
    assert st.current.timer_id == f"{tid}/wait-ci/1/timer-2"
    before = snapshot(db)

    old_check = CheckReported(
        event_id="late-check-1", at_ms=clock.now_ms(), command_id=f"{tid}/wait-ci/1/check-1",
        step="wait-ci", attempt=1, check_number=1, passed=True,
    )
    old_timer = TimerFired(event_id="late-timer-1", at_ms=clock.now_ms(), timer_id=f"{tid}/wait-ci/1/timer-1")
    with pytest.raises(IllegalEventError):
        engine.apply(tid, old_check)
    with pytest.raises(IllegalEventError, match="not the timer the task waits on"):
        engine.apply(tid, old_timer)

    assert snapshot(db) == before


def test_a_redelivered_command_whose_outcome_is_recorded_is_not_run_again(
    engine: Engine, clock: FakeClock, workspace: Path,
) -> None:
    """a's outcome is in the log but its outbox row survived; when the row comes back
    (lease expired), the worker acknowledges it without running the step again."""
    tid = engine.submit(TWO_STEPS, {"workspace": str(workspace)})
    [claim] = engine.store.claim("lost-worker", clock.now_ms(), 1_000)
    engine.apply(tid, report(claim.command_id, "a", at_ms=clock.now_ms()))  # recorded, row not completed
    assert [r["command_id"] for r in engine.store.outbox(tid)] == [f"{tid}/a/1", f"{tid}/b/1"]

    clock.advance(2)
    drain(engine)

    assert lines(workspace / "a.calls") == []  # a never ran again
    assert lines(workspace / "b.calls") == [f"{tid}/b/1"]
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert [e.type for e in engine.store.events(tid)].count("AttemptReported") == 2
    assert engine.store.outbox(tid) == []


def test_a_late_report_with_an_old_fencing_token_is_refused_and_writes_nothing(
    engine: Engine, clock: FakeClock, db: Path, workspace: Path,
) -> None:
    """Worker 1's lease expires, worker 2 claims the command again (token 2); worker 1's
    report, renewal, release and ack under token 1 all fail and change nothing."""
    tid = engine.submit(TWO_STEPS, {"workspace": str(workspace)})
    [old] = engine.store.claim("w1", clock.now_ms(), 1_000)
    clock.advance(2)
    [new] = engine.store.claim("w2", clock.now_ms(), 30_000)
    assert new.command_id == old.command_id and (old.token, new.token) == (1, 2)
    before = snapshot(db)
    state_before = engine.state(tid).to_dict()

    with pytest.raises(StaleLeaseError) as refused:
        engine.apply(tid, report(old.command_id, "a", at_ms=clock.now_ms()), complete=(old.command_id, old.token))
    assert (refused.value.token, refused.value.current) == (1, 2)
    assert engine.store.renew(old.command_id, old.token, clock.now_ms(), 30_000) is False
    engine.store.release(old.command_id, old.token, clock.now_ms(), failed=True, error="late")
    engine.store.ack(old.command_id, old.token)

    assert snapshot(db) == before
    assert engine.state(tid).to_dict() == state_before
    [row] = [r for r in engine.store.outbox(tid) if r["command_id"] == old.command_id]
    assert (row["lease_owner"], row["token"]) == ("w2", 2)

    applied = engine.apply(tid, report(new.command_id, "a", at_ms=clock.now_ms()), complete=(new.command_id, new.token))
    assert applied.state.current is not None and applied.state.current.step == "b"
