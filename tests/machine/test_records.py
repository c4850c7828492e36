"""The record: every attempt once with all its fields, stale reports refused, state that
round-trips through its dict form, and events and commands that round-trip through the log."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from statewright import IllegalEventError, TaskState, TaskStatus
from statewright._canonical import canonical_json
from statewright.machine.commands import command_from_dict
from statewright.machine.events import AttemptReported, event_from_dict
from statewright.machine.state import Attempt, Outcome
from strategies import Driver, Run, fix_bug, runs


def full_run() -> Driver:
    """fix-bug through a test failure, a review rejection, a repair, a rejected approval,
    an expiry, an operator retry, a slow CI and a merge."""
    d = Driver(fix_bug())
    d.submit({"issue": 42})
    d.report(actor="agent:fixer", artifacts={"diff": "sha:1"}, note="done, approved",
             cost={"tokens_in": 1200, "tokens_out": 300, "money_usd": 0.02, "seconds": 41.0})
    d.report(actor="code:pytest", ok=False, error="exit_status", output="1 failed")
    d.report(actor="agent:fixer", artifacts={"diff": "sha:2"})
    d.report(actor="code:pytest", output="3 passed")
    d.report(actor="agent:reviewer", verdict={"approved": "maybe"})  # repair requested
    d.report(actor="agent:reviewer", verdict={"approved": False, "must_fix": ["add a test"]})
    d.report(actor="agent:fixer", artifacts={"diff": "sha:3"})
    d.report(actor="code:pytest")
    d.report(actor="agent:reviewer", verdict={"approved": True, "summary": "good"})
    d.reject("bob", reason_code="wrong_branch")
    d.report(actor="agent:fixer", artifacts={"diff": "sha:4"})
    d.report(actor="code:pytest")
    d.report(actor="agent:reviewer", verdict={"approved": True})
    d.fire(advance_ms=3_600_000)  # nobody approved in time: loop budget 2 of 2 -> halt
    d.retry("olga", "approver was on leave")
    d.grant("carol")
    d.check(False, detail="pending")
    d.fire(advance_ms=300_000)
    d.check(True)
    d.report(actor="code:merge", artifacts={"merge": "sha:4"})
    return d


def test_every_attempt_is_recorded_exactly_once_in_order() -> None:
    d = full_run()
    assert d.state.status is TaskStatus.COMPLETED
    assert [(a.step, a.number, a.outcome.value, a.epoch, a.route) for a in d.state.attempts] == [
        ("implement", 1, "passed", 0, "continue"),
        ("test", 1, "failed", 0, "loop_back->implement"),
        ("implement", 2, "passed", 0, "continue"),
        ("test", 2, "passed", 0, "continue"),
        ("review", 1, "failed", 0, "loop_back->implement"),
        ("implement", 3, "passed", 0, "continue"),
        ("test", 3, "passed", 0, "continue"),
        ("review", 2, "passed", 0, "continue"),
        ("approve", 1, "failed", 0, "loop_back->implement"),
        ("implement", 4, "passed", 0, "continue"),
        ("test", 4, "passed", 0, "continue"),
        ("review", 3, "passed", 0, "continue"),
        ("approve", 2, "failed", 0, "halt (loop budget exhausted)"),
        ("approve", 3, "passed", 1, "continue"),
        ("ci", 1, "passed", 1, "continue"),
        ("merge", 1, "passed", 1, "continue"),
    ]


def test_an_attempt_carries_kind_owner_actor_outcome_verdict_artifacts_cost_and_note() -> None:
    d = full_run()
    first = d.state.attempts[0]
    assert first == Attempt(
        step="implement", kind="ai", owner="dev", actor="agent:fixer", number=1,
        outcome=Outcome.PASSED, verdict=None, artifacts={"diff": "sha:1"},
        cost={"tokens_in": 1200, "tokens_out": 300, "money_usd": 0.02, "seconds": 41.0},
        note="done, approved", started_at_ms=1_001_000, ended_at_ms=1_002_000, epoch=0,
        route="continue", key="t1/implement/1",
    )
    review = d.state.attempts_of("review")[0]
    assert (review.kind, review.owner, review.actor, review.reason) == (
        "ai", "reviewers", "agent:reviewer", "not_approved"
    )
    assert review.verdict == {"approved": False, "must_fix": ["add a test"]}
    test = d.state.attempts_of("test")[0]
    assert (test.kind, test.actor, test.reason, test.output) == (
        "code", "code:pytest", "exit_status", "1 failed"
    )
    ci = d.state.attempts_of("ci")[0]
    assert (ci.kind, ci.owner, ci.checks) == ("wait", "dev", 2)
    approve = d.state.attempts_of("approve")
    assert [(a.kind, a.actor, a.reason) for a in approve] == [
        ("human", "bob", "wrong_branch"),
        ("human", "timer:expiry", "approval_expired"),
        ("human", "carol", ""),
    ]


def test_a_duplicate_report_of_a_finished_attempt_is_refused() -> None:
    d = Driver(fix_bug())
    d.submit()
    report = d.report_event()
    d.apply(report)
    before = d.state
    with pytest.raises(IllegalEventError, match="it is stale or duplicated"):
        d.apply(report)
    assert d.state is before


def test_a_report_for_another_command_is_refused() -> None:
    d = Driver(fix_bug())
    d.submit()
    with pytest.raises(IllegalEventError, match="does not match the command in flight"):
        d.report(command_id="t1/implement/2")


def test_a_late_report_of_the_original_command_after_a_repair_is_refused() -> None:
    d = Driver(fix_bug())
    d.submit()
    d.report()
    d.report()
    original = d.report_event(verdict={"approved": "maybe"})
    d.apply(original)
    assert d.state.current is not None
    assert d.state.current.command_id.endswith("/repair")
    with pytest.raises(IllegalEventError, match="stale or duplicated"):
        d.apply(AttemptReported(**{**original.__dict__, "event_id": "again",
                                   "verdict": {"approved": True}}))


def test_a_report_after_the_task_ended_is_refused() -> None:
    d = full_run()
    with pytest.raises(IllegalEventError, match="not allowed while the task is completed"):
        d.apply(d.make(AttemptReported, command_id="t1/merge/1", ok=True))


def test_the_state_round_trips_through_its_dict_at_every_step() -> None:
    d = Driver(fix_bug())
    states = [d.state]
    for event in full_run().events:
        d.apply(event)
        states.append(d.state)
    for state in states:
        data = json.loads(json.dumps(state.to_dict()))
        assert TaskState.from_dict(data, state.workflow) == state
        assert TaskState.from_dict(data, state.workflow).to_dict() == state.to_dict()


def test_the_dict_names_the_workflow_version_and_hash() -> None:
    state = full_run().state
    data = state.to_dict()
    assert data["workflow"] == {
        "name": "fix-bug", "version": 1, "hash": state.workflow.content_hash
    }
    assert data["status"] == "completed"


def test_events_and_commands_round_trip_through_their_logged_form() -> None:
    d = Driver(fix_bug())
    commands = []
    for event in full_run().events:
        logged = json.loads(json.dumps(event.to_dict()))
        assert event_from_dict(logged) == event
        commands.extend(d.apply(event))
    assert len(commands) > 20
    for command in commands:
        assert command_from_dict(json.loads(json.dumps(command.to_dict()))) == command


@settings(max_examples=60, deadline=None)
@given(runs())
def test_the_wire_form_serialises_as_the_dict_form(run: Run) -> None:
    """The store serialises ``wire()`` (shared values) where ``to_dict()`` copies: equal JSON."""
    for step in run.steps:
        assert canonical_json(step.event.wire()) == canonical_json(step.event.to_dict())
    for applied in run.accepted:
        for command in applied.commands:
            assert canonical_json(command.wire()) == canonical_json(command.to_dict())


def test_an_unknown_event_type_is_refused() -> None:
    with pytest.raises(IllegalEventError, match="unknown event type 'AttemptSucceded'"):
        event_from_dict({"type": "AttemptSucceded", "event_id": "e1", "at_ms": 1})
