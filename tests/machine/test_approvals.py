"""Human steps: approvals bind to the proposal hash, need the role, exclude agents and the
authors of the work, expire, and rejections carry a reason code."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from statewright import ApprovalError, IllegalEventError, TaskStatus, workflow_from_dict
from statewright._time import when
from statewright.approvals import build_proposal, proposal_hash
from statewright.definition import Workflow
from statewright.machine.commands import RequestApproval, StartTimer
from statewright.machine.events import ApprovalGranted, TaskRetried, TimerFired
from statewright.machine.state import Approval, Outcome
from strategies import FIXER, Driver

HOUR_MS = 3_600_000


def approval_workflow(on_failure: Any = "halt", expires: str | None = "1h") -> Workflow:
    approve: dict[str, Any] = {
        "id": "approve", "kind": "human", "owner": "maintainers",
        "approvers": {"role": "maintainer"}, "separate_from": ["implement"],
        "on_failure": on_failure,
    }
    if expires is not None:
        approve["expires_after"] = expires
    return workflow_from_dict({
        "workflow": "w",
        "steps": [
            {"id": "implement", "kind": "ai", "owner": "dev", "agent": FIXER},
            approve,
            {"id": "merge", "kind": "code", "owner": "dev", "run": {"command": ["merge"]}},
        ],
    })


def at_approval(workflow: Workflow | None = None, implementer: str = "agent:fixer") -> Driver:
    d = Driver(workflow or approval_workflow())
    d.submit({"issue": 7})
    d.report(actor=implementer, artifacts={"diff": "sha:1"})
    assert d.state.status is TaskStatus.AWAITING_APPROVAL
    return d


def test_entering_a_human_step_requests_approval_of_the_proposal_hash() -> None:
    d = Driver(approval_workflow())
    d.submit({"issue": 7})
    commands = d.report(artifacts={"diff": "sha:1"})
    request, timer = commands
    assert isinstance(request, RequestApproval)
    assert isinstance(timer, StartTimer)
    assert request.proposal_hash == proposal_hash(d.state, 1)
    assert request.role == "maintainer"
    assert request.expires_at_ms == d.now_ms + HOUR_MS
    assert (timer.due_at_ms, timer.purpose) == (request.expires_at_ms, "approval_expiry")
    assert d.state.current is not None
    assert d.state.current.proposal_hash == request.proposal_hash
    proposal = build_proposal(d.state, 1)
    assert proposal["input"] == {"issue": 7}
    assert proposal["steps"] == [{
        "step": "implement", "attempt": 1, "actor": "agent:worker", "outcome": "passed",
        "verdict": None, "artifacts": {"diff": "sha:1"},
    }]


def test_no_expiry_means_no_timer() -> None:
    d = Driver(approval_workflow(expires=None))
    d.submit()
    (request,) = d.report()
    assert isinstance(request, RequestApproval)
    assert request.expires_at_ms is None


def test_a_grant_records_the_approval_and_runs_the_next_step() -> None:
    d = at_approval()
    expected_hash = proposal_hash(d.state, 1)
    commands = d.grant("alice", comment="ship it")
    assert [(c.type, c.step) for c in commands] == [("RunStep", "merge")]
    assert d.state.approvals == (Approval("approve", "alice", expected_hash, d.now_ms),)
    attempt = d.state.attempts[-1]
    assert (attempt.step, attempt.kind, attempt.owner, attempt.actor) == (
        "approve", "human", "maintainers", "alice"
    )
    assert attempt.verdict == {"approved": True, "proposal_hash": expected_hash}
    assert attempt.detail == "ship it"


def refused(d: Driver, event: Any, fragment: str) -> None:
    before = d.state
    before_dict = before.to_dict()
    with pytest.raises(ApprovalError) as info:
        d.apply(event)
    assert fragment in str(info.value)
    assert d.state is before
    assert before.to_dict() == before_dict


def test_an_approver_without_the_role_is_refused() -> None:
    d = at_approval()
    refused(d, d.grant_event("bob", roles=("developer",)),
            "'bob' lacks the role 'maintainer' needed to approve (has: developer)")
    refused(d, d.reject_event("bob", roles=()),
            "'bob' lacks the role 'maintainer' needed to reject (has: none)")


@pytest.mark.parametrize("actor", ["agent:reviewer", "code:merge", "system:loop"])
def test_an_agent_or_system_actor_may_never_approve(actor: str) -> None:
    d = at_approval()
    refused(d, d.grant_event(actor), f"{actor!r} is an agent or system actor")
    refused(d, d.reject_event(actor), f"{actor!r} is an agent or system actor")


def test_an_actor_of_a_separate_from_step_may_not_approve_it() -> None:
    d = at_approval(implementer="alice")
    refused(d, d.grant_event("alice"),
            "'alice' acted in step 'implement' and may not approve it (separation of duty)")
    d.grant("bob")
    assert d.state.approvals[-1].actor == "bob"


def test_a_nameless_approver_is_refused() -> None:
    d = at_approval()
    refused(d, d.grant_event(""), "an approver name is required")


def test_an_approval_for_another_step_is_refused() -> None:
    d = at_approval()
    refused(d, d.grant_event(step="merge"), "the task waits at 'approve', not 'merge'")


def test_an_approval_must_quote_the_proposal_hash() -> None:
    d = at_approval()
    refused(d, d.grant_event(proposal_hash=""), "an approval must quote the proposal hash")
    refused(d, d.grant_event(proposal_hash="f" * 64), "is not the current proposal")


def test_an_approval_at_or_after_the_deadline_is_refused() -> None:
    d = at_approval()
    assert d.state.current is not None
    deadline = d.state.current.expires_at_ms
    assert deadline is not None
    late = replace(d.grant_event(), at_ms=deadline)
    refused(d, late, f"the approval window closed at {when(deadline)}")
    d.apply(replace(late, event_id="in-time", at_ms=deadline - 1))
    assert d.state.status is TaskStatus.RUNNING


def test_expiry_takes_the_failure_route() -> None:
    d = at_approval()
    assert d.state.current is not None
    shown = d.state.current.proposal_hash
    assert d.fire(advance_ms=HOUR_MS) == []
    assert d.state.status is TaskStatus.HALTED
    assert d.state.halt is not None
    assert (d.state.halt.step, d.state.halt.reason) == ("approve", "approval_expired")
    attempt = d.state.attempts[-1]
    assert (attempt.actor, attempt.outcome) == ("timer:expiry", Outcome.FAILED)
    late = d.make(ApprovalGranted, step="approve", actor="bob", roles=("maintainer",),
                  proposal_hash=shown)
    with pytest.raises(IllegalEventError, match="not allowed while the task is halted"):
        d.apply(late)


def test_expiry_with_a_loop_back_sends_the_work_back() -> None:
    d = at_approval(approval_workflow(on_failure={"loop_back": "implement", "max_attempts": 2}))
    commands = d.fire(advance_ms=HOUR_MS)
    assert [(c.type, c.step, c.attempt) for c in commands] == [("RunStep", "implement", 2)]
    assert d.state.loop_backs[-1].reason == "approval_expired"


def test_a_stale_expiry_timer_is_refused_after_the_loop() -> None:
    d = at_approval(approval_workflow(on_failure={"loop_back": "implement", "max_attempts": 3}))
    assert d.state.current is not None
    old_timer = d.state.current.timer_id
    d.reject("bob")
    d.report(artifacts={"diff": "sha:2"})
    assert d.state.status is TaskStatus.AWAITING_APPROVAL
    with pytest.raises(IllegalEventError, match="is not the timer the task waits on"):
        d.apply(d.make(TimerFired, timer_id=old_timer))


def test_a_changed_proposal_invalidates_the_old_hash() -> None:
    d = at_approval(approval_workflow(on_failure={"loop_back": "implement", "max_attempts": 3}))
    assert d.state.current is not None
    old_hash = d.state.current.proposal_hash
    d.reject("bob", reason_code="wrong_fix", comment="the fix is in the wrong module")
    (request,) = [c for c in d.report(artifacts={"diff": "sha:2"}) if c.type == "RequestApproval"]
    assert isinstance(request, RequestApproval)
    assert request.proposal_hash != old_hash
    assert request.proposal_hash == proposal_hash(d.state, 1)
    refused(d, d.grant_event("bob", proposal_hash=old_hash), "is not the current proposal")
    d.grant("bob")
    assert d.state.approvals[-1].proposal_hash == request.proposal_hash


def test_the_same_work_redone_still_gets_a_new_hash() -> None:
    """A loop-back re-runs the step: a new attempt is a new proposal even with equal output."""
    d = at_approval(approval_workflow(on_failure={"loop_back": "implement", "max_attempts": 3}))
    assert d.state.current is not None
    old_hash = d.state.current.proposal_hash
    d.reject("bob")
    d.report(artifacts={"diff": "sha:1"})
    assert d.state.current is not None
    assert d.state.current.proposal_hash != old_hash


def test_a_rejection_is_recorded_with_its_reason_code() -> None:
    d = at_approval()
    assert d.state.current is not None
    shown = d.state.current.proposal_hash
    assert d.reject("bob", reason_code="insufficient_evidence", comment="no callback") == []
    attempt = d.state.attempts[-1]
    assert (attempt.actor, attempt.outcome, attempt.reason, attempt.detail) == (
        "bob", Outcome.FAILED, "insufficient_evidence", "no callback"
    )
    assert attempt.verdict == {
        "approved": False, "proposal_hash": shown, "reason_code": "insufficient_evidence"
    }
    assert d.state.halt is not None
    assert d.state.halt.reason == "insufficient_evidence"
    assert d.state.approvals == ()


def test_a_rejection_needs_a_reason_code() -> None:
    d = at_approval()
    refused(d, d.reject_event("bob", reason_code=""), "a rejection needs a reason code")


def test_approval_error_is_an_illegal_event() -> None:
    assert issubclass(ApprovalError, IllegalEventError)


def test_the_proposal_shows_an_advisory_failure_not_an_older_pass() -> None:
    """After a loop, a review that now fails (advisory) is shown failed to the approver."""
    workflow = workflow_from_dict({
        "workflow": "w",
        "steps": [
            {"id": "implement", "kind": "ai", "owner": "dev", "agent": FIXER},
            {"id": "review", "kind": "ai", "owner": "dev", "agent": FIXER,
             "output_schema": "review", "on_failure": "continue"},
            {"id": "approve", "kind": "human", "owner": "m", "approvers": {"role": "maintainer"},
             "on_failure": {"loop_back": "implement", "max_attempts": 3}},
            {"id": "merge", "kind": "code", "owner": "dev", "run": {"command": ["merge"]}},
        ],
    })
    d = Driver(workflow)
    d.submit()
    d.report()
    d.report(verdict={"approved": True})
    d.reject("bob")
    d.report()
    d.report(verdict={"approved": False, "must_fix": ["broken"]})
    review = build_proposal(d.state, 2)["steps"][1]
    assert (review["attempt"], review["outcome"]) == (2, "failed")
    assert review["verdict"] == {"approved": False, "must_fix": ["broken"]}


@pytest.mark.parametrize("actor", ["alice\n", "alice ", " alice", "al\u00efce", ""])
def test_a_name_that_is_not_a_whole_person_name_is_refused(actor: str) -> None:
    """Names are matched whole: 'alice\\n' (which ``$`` would accept) is not alice, nor anyone."""
    d = at_approval(implementer="alice")
    refused(d, d.grant_event(actor), "approver name is required" if not actor else "must be 1 to 64")


def test_a_revoked_approval_halts_at_the_human_step_whatever_the_route() -> None:
    """The worker reports approval_revoked for the step after the approval: it halts at the
    human step (not the failing step's loop_back), so a retry asks for a new approval."""
    wf = workflow_from_dict({
        "workflow": "w",
        "steps": [
            {"id": "implement", "kind": "ai", "owner": "dev", "agent": FIXER},
            {"id": "approve", "kind": "human", "owner": "m", "approvers": {"role": "maintainer"}},
            {"id": "merge", "kind": "code", "owner": "dev", "run": {"command": ["merge"]},
             "on_failure": {"loop_back": "implement", "max_attempts": 3}},
        ],
    })
    d = at_approval(wf)
    d.grant("alice", token_id="tk_1")
    assert d.state.approvals[-1].token_id == "tk_1"

    assert d.report(ok=False, error="approval_revoked", detail="'alice' was removed") == []

    assert d.state.status is TaskStatus.HALTED and d.state.halt is not None
    assert (d.state.halt.step, d.state.halt.reason) == ("approve", "approval_revoked")
    assert (d.state.attempts[-1].step, d.state.attempts[-1].outcome) == ("merge", Outcome.HALTED)
    d.apply(d.make(TaskRetried, actor="olga", reason="ask again"))
    assert d.state.status is TaskStatus.AWAITING_APPROVAL and d.state.current is not None
    assert d.state.current.step == "approve"
