"""Every (task status, event type) pair: legal ones give the stated state and commands,
illegal ones raise IllegalEventError and leave the state exactly as it was."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from statewright import IllegalEventError, TaskStatus, workflow_from_dict
from statewright.machine.commands import Command
from statewright.machine.events import (
    EVENT_TYPES,
    ApprovalGranted,
    ApprovalRejected,
    ArtifactsCaptured,
    AttemptReported,
    CheckReported,
    ChildEnded,
    Event,
    EvidenceAdded,
    NotificationSent,
    TaskCancelled,
    TaskRetried,
    TaskSubmitted,
    TimerFired,
)
from statewright.machine.state import new_task
from statewright.machine.task import LEGAL, transition
from strategies import Driver

AGENT = {"type": "command", "command": ["python", "fixer.py"]}

# implement (ai) -> ci (wait, 2 checks) -> approve (human, expires) -> merge (code)
TABLE_WORKFLOW = workflow_from_dict({
    "workflow": "table",
    "steps": [
        {"id": "implement", "kind": "ai", "owner": "dev", "agent": AGENT},
        {"id": "ci", "kind": "wait", "owner": "dev", "check": {"command": ["ci"]},
         "every": "1m", "max_checks": 2},
        {"id": "approve", "kind": "human", "owner": "m", "approvers": {"role": "maintainer"},
         "separate_from": ["implement"], "expires_after": "1h"},
        {"id": "merge", "kind": "code", "owner": "dev", "run": {"command": ["git", "merge"]}},
    ],
})
EARLY_WORKFLOW = workflow_from_dict({
    "workflow": "early",
    "steps": [
        {"id": "decide", "kind": "ai", "owner": "t", "agent": AGENT, "on_success": "complete"},
        {"id": "close", "kind": "code", "owner": "t", "run": {"command": ["close"]}},
    ],
})

# approve (human, shows draft.txt by content hash) -> publish (code)
CAPTURE_WORKFLOW = workflow_from_dict({
    "workflow": "capture",
    "steps": [
        {"id": "approve", "kind": "human", "owner": "m", "approvers": {"role": "maintainer"},
         "artifacts": ["draft.txt"]},
        {"id": "publish", "kind": "code", "owner": "dev", "run": {"command": ["publish"]}},
    ],
})


def new() -> Driver:
    return Driver(TABLE_WORKFLOW)


def running_ai() -> Driver:
    d = new()
    d.submit()
    return d


def capturing() -> Driver:
    d = Driver(CAPTURE_WORKFLOW)
    d.submit()
    return d


def running_check() -> Driver:
    d = running_ai()
    d.report()
    return d


def waiting() -> Driver:
    d = running_check()
    d.check(False)
    return d


def awaiting_approval() -> Driver:
    d = running_check()
    d.check(True)
    return d


def completed() -> Driver:
    d = awaiting_approval()
    d.grant()
    d.report(actor="code:merge")
    return d


def completed_early() -> Driver:
    d = Driver(EARLY_WORKFLOW)
    d.submit()
    d.report()
    return d


def halted() -> Driver:
    d = running_ai()
    d.report(ok=False, error="timeout")
    return d


def cancelled() -> Driver:
    d = running_ai()
    d.cancel()
    return d


FIXTURES: dict[str, tuple[TaskStatus, Callable[[], Driver]]] = {
    "new": (TaskStatus.NEW, new),
    "running_ai": (TaskStatus.RUNNING, running_ai),
    "running_check": (TaskStatus.RUNNING, running_check),
    "capturing": (TaskStatus.RUNNING, capturing),
    "waiting": (TaskStatus.WAITING, waiting),
    "awaiting_approval": (TaskStatus.AWAITING_APPROVAL, awaiting_approval),
    "completed": (TaskStatus.COMPLETED, completed),
    "completed_early": (TaskStatus.COMPLETED_EARLY, completed_early),
    "halted": (TaskStatus.HALTED, halted),
    "cancelled": (TaskStatus.CANCELLED, cancelled),
}


def natural(d: Driver, event_type: str) -> Event:
    """The best-formed event of ``event_type`` for the driver's state (ids match if they can)."""
    cur = d.state.current
    cid = cur.command_id if cur else "t1/implement/1"
    fields: dict[str, Any] = {
        TaskSubmitted.type: {"input": {"issue": 1}},
        AttemptReported.type: {"command_id": cid, "actor": "agent:fixer", "ok": True},
        CheckReported.type: {"command_id": cid, "passed": True},
        ArtifactsCaptured.type: {
            "command_id": cid, "step": "approve",
            "artifacts": {"draft.txt": {"sha256": "ab" * 32, "bytes": 5, "text": "hello"}},
        },
        TimerFired.type: {"timer_id": cur.timer_id if cur else "t1/ci/1/timer-1"},
        ApprovalGranted.type: {
            "step": "approve", "actor": "alice", "roles": ("maintainer",),
            "proposal_hash": cur.proposal_hash if cur else "0" * 64,
        },
        ApprovalRejected.type: {
            "step": "approve", "actor": "alice", "roles": ("maintainer",),
            "proposal_hash": cur.proposal_hash if cur else "0" * 64, "reason_code": "wrong_fix",
        },
        TaskRetried.type: {"actor": "olga", "reason": "runner was down"},
        EvidenceAdded.type: {"actor": "olga", "evidence": {"id": "callback-2"}, "note": "the callback"},
        TaskCancelled.type: {"actor": "olga", "reason": "duplicate"},
        ChildEnded.type: {"child_id": "t1.implement.1.0", "step": "implement", "attempt": 1, "status": "completed"},
        NotificationSent.type: {
            "command_id": "t1/halted-0/email-0123456789ab", "idempotency_key": "t1/halted-0/email-0123456789ab",
            "event": "halted", "target": "email ops@example.com", "delivered": True,
        },
    }[event_type]
    return d.make(EVENT_TYPES[event_type], **fields)


@dataclass(frozen=True)
class Legal:
    status: TaskStatus
    commands: tuple[tuple[str, str, int], ...]  # (type, step, attempt)
    check: Callable[[Driver], Any] = lambda d: None


ILLEGAL = None
TS, AR, CR, TF = (TaskSubmitted.type, AttemptReported.type, CheckReported.type, TimerFired.type)
AG, AJ, RT, CX = (ApprovalGranted.type, ApprovalRejected.type, TaskRetried.type,
                  TaskCancelled.type)
AC, EV, NS, CE = ArtifactsCaptured.type, EvidenceAdded.type, NotificationSent.type, ChildEnded.type


def _evidence_kept(d: Driver) -> None:
    assert [(e.actor, e.evidence) for e in d.state.evidence] == [("olga", {"id": "callback-2"})]


def _proposed_again(d: Driver) -> None:
    _evidence_kept(d)
    assert d.last[0].proposal_hash == d.state.current.proposal_hash


def _cancelled_check(d: Driver) -> None:
    assert d.state.current is None
    assert d.state.operator_actions[-1].action == "cancel"


def _halted_at(step: str, reason: str) -> Callable[[Driver], None]:
    def check(d: Driver) -> None:
        assert d.state.halt is not None
        assert (d.state.halt.step, d.state.halt.reason) == (step, reason)
    return check


CANCEL = Legal(TaskStatus.CANCELLED, (), _cancelled_check)


def _only_version_moved(d: Driver) -> None:
    replayed = new_task("t1", d.state.workflow)
    for event in d.events[:-1]:
        replayed, _ = transition(replayed, event)
    before, after = replayed.to_dict(), d.state.to_dict()
    for changed in ("version", "updated_at_ms"):
        before.pop(changed), after.pop(changed)
    assert after == before

TABLE: dict[tuple[str, str], Legal | None] = {
    ("new", TS): Legal(TaskStatus.RUNNING, (("RunStep", "implement", 1),),
                       lambda d: d.state.input == {"issue": 1}),
    ("new", AR): ILLEGAL, ("new", CR): ILLEGAL, ("new", TF): ILLEGAL, ("new", AG): ILLEGAL,
    ("new", AJ): ILLEGAL, ("new", RT): ILLEGAL, ("new", CX): ILLEGAL,

    ("running_ai", TS): ILLEGAL,
    ("running_ai", AR): Legal(TaskStatus.RUNNING, (("RunCheck", "ci", 1),)),
    ("running_ai", CR): ILLEGAL,  # allowed while running, but an ai step runs no checks
    ("running_ai", TF): ILLEGAL, ("running_ai", AG): ILLEGAL, ("running_ai", AJ): ILLEGAL,
    ("running_ai", RT): ILLEGAL,
    ("running_ai", CX): CANCEL,

    ("running_check", TS): ILLEGAL,
    ("running_check", AR): ILLEGAL,  # a wait step takes check reports only
    ("running_check", CR): Legal(
        TaskStatus.AWAITING_APPROVAL,
        (("RequestApproval", "approve", 1), ("StartTimer", "approve", 1)),
    ),
    ("running_check", TF): ILLEGAL, ("running_check", AG): ILLEGAL,
    ("running_check", AJ): ILLEGAL, ("running_check", RT): ILLEGAL,
    ("running_check", CX): CANCEL,

    ("waiting", TS): ILLEGAL, ("waiting", AR): ILLEGAL, ("waiting", CR): ILLEGAL,
    ("waiting", TF): Legal(TaskStatus.RUNNING, (("RunCheck", "ci", 1),),
                           lambda d: d.last[0].check_number == 2),
    ("waiting", AG): ILLEGAL, ("waiting", AJ): ILLEGAL, ("waiting", RT): ILLEGAL,
    ("waiting", CX): CANCEL,

    ("awaiting_approval", TS): ILLEGAL, ("awaiting_approval", AR): ILLEGAL,
    ("awaiting_approval", CR): ILLEGAL,
    ("awaiting_approval", TF): Legal(TaskStatus.HALTED, (),
                                     _halted_at("approve", "approval_expired")),
    ("awaiting_approval", AG): Legal(TaskStatus.RUNNING, (("RunStep", "merge", 1),),
                                     lambda d: d.state.approvals[-1].actor == "alice"),
    ("awaiting_approval", AJ): Legal(TaskStatus.HALTED, (), _halted_at("approve", "wrong_fix")),
    ("awaiting_approval", RT): ILLEGAL,
    ("awaiting_approval", CX): CANCEL,

    **{("completed", t): ILLEGAL for t in EVENT_TYPES},
    **{("completed_early", t): ILLEGAL for t in EVENT_TYPES},
    **{("cancelled", t): ILLEGAL for t in EVENT_TYPES},

    ("halted", TS): ILLEGAL, ("halted", AR): ILLEGAL, ("halted", CR): ILLEGAL,
    ("halted", TF): ILLEGAL, ("halted", AG): ILLEGAL, ("halted", AJ): ILLEGAL,
    ("halted", RT): Legal(TaskStatus.RUNNING, (("RunStep", "implement", 2),),
                          lambda d: (d.state.epoch, d.state.halt) == (1, None)),
    ("halted", CX): CANCEL,

    ("capturing", AC): Legal(
        TaskStatus.AWAITING_APPROVAL, (("RequestApproval", "approve", 1),),
        lambda d: d.state.current.captured["draft.txt"]["bytes"] == 5,
    ),
    **{("capturing", t): ILLEGAL for t in (TS, AR, CR, TF, AG, AJ, RT)},
    ("capturing", CX): CANCEL,
    ("capturing", EV): Legal(TaskStatus.RUNNING, (), _evidence_kept),
    ("new", EV): ILLEGAL,
    ("running_ai", EV): Legal(TaskStatus.RUNNING, (), _evidence_kept),
    ("running_check", EV): Legal(TaskStatus.RUNNING, (), _evidence_kept),
    ("waiting", EV): Legal(TaskStatus.WAITING, (), _evidence_kept),
    ("awaiting_approval", EV): Legal(TaskStatus.AWAITING_APPROVAL, (("RequestApproval", "approve", 1),),
                                     _proposed_again),
    ("halted", EV): Legal(TaskStatus.HALTED, (), _evidence_kept),
    **{(name, AC): ILLEGAL for name in ("new", "running_ai", "running_check", "waiting",
                                         "awaiting_approval", "halted")},
    # A notification's outcome is recorded whatever the task is doing, and changes nothing else.
    ("new", NS): ILLEGAL,
    **{(name, NS): Legal(status, (), _only_version_moved)
       for name, status in (("running_ai", TaskStatus.RUNNING), ("running_check", TaskStatus.RUNNING),
                            ("capturing", TaskStatus.RUNNING), ("waiting", TaskStatus.WAITING),
                            ("awaiting_approval", TaskStatus.AWAITING_APPROVAL),
                            ("completed", TaskStatus.COMPLETED), ("completed_early", TaskStatus.COMPLETED_EARLY),
                            ("halted", TaskStatus.HALTED), ("cancelled", TaskStatus.CANCELLED))},
    # A child's end is recorded in any status but new; none of these tasks started that child
    # (tests/machine/test_children.py has the ones that did).
    **{(name, CE): ILLEGAL for name in FIXTURES},
}


def test_the_table_covers_every_status_and_event_type() -> None:
    statuses = {status for status, _ in FIXTURES.values()}
    assert statuses == set(TaskStatus)
    assert set(TABLE) == {(name, t) for name in FIXTURES for t in EVENT_TYPES}


def test_the_table_agrees_with_the_reducers_legal_map() -> None:
    for (name, event_type), expected in TABLE.items():
        status = FIXTURES[name][0]
        if expected is not None:
            assert event_type in LEGAL[status], (name, event_type)


@pytest.mark.parametrize(("fixture", "event_type"), sorted(TABLE))
def test_transition(fixture: str, event_type: str) -> None:
    status, build = FIXTURES[fixture]
    d = build()
    assert d.state.status is status
    before = d.state
    before_dict = before.to_dict()
    event = natural(d, event_type)
    expected = TABLE[(fixture, event_type)]
    if expected is None:
        with pytest.raises(IllegalEventError):
            d.apply(event)
        assert d.state is before
        assert before.to_dict() == before_dict
        return
    commands: list[Command] = d.apply(event)
    assert d.state.status is expected.status
    assert d.state.version == before.version + 1
    assert d.state.updated_at_ms == event.at_ms
    assert [(c.type, c.step, c.attempt) for c in commands] == list(expected.commands)
    assert all(c.task_id == "t1" for c in commands)
    expected.check(d)
    assert before.to_dict() == before_dict  # the old state object was not touched


def test_an_illegal_event_names_the_task_status_and_event() -> None:
    d = completed()
    with pytest.raises(IllegalEventError) as info:
        d.apply(natural(d, AttemptReported.type))
    assert str(info.value) == (
        "task t1: event AttemptReported is not allowed while the task is completed"
    )
    assert (info.value.status, info.value.event_type) == ("completed", "AttemptReported")
