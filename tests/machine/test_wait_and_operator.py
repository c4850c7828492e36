"""Wait steps count checks against max_checks; operators retry halted tasks or cancel."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import IllegalEventError, TaskStatus, workflow_from_dict
from statewright.definition import Workflow
from statewright.machine.commands import RunCheck, StartTimer
from statewright.machine.events import CheckReported, TimerFired
from statewright.machine.state import OperatorAction, Outcome
from strategies import FIXER, Driver, fix_bug


def wait_workflow(max_checks: int = 3, on_failure: Any = "halt") -> Workflow:
    return workflow_from_dict({
        "workflow": "w",
        "steps": [
            {"id": "build", "kind": "code", "owner": "dev", "run": {"command": ["make"]}},
            {"id": "ci", "kind": "wait", "owner": "dev", "check": {"command": ["ci"]},
             "every": "5m", "max_checks": max_checks, "on_failure": on_failure},
            {"id": "merge", "kind": "code", "owner": "dev", "run": {"command": ["merge"]}},
        ],
    })


def at_ci(workflow: Workflow) -> Driver:
    d = Driver(workflow)
    d.submit()
    (check,) = d.report()
    assert isinstance(check, RunCheck)
    assert check.check_number == 1
    return d


def test_a_failed_check_sleeps_on_a_durable_timer_then_checks_again() -> None:
    d = at_ci(wait_workflow())
    (timer,) = d.check(False, detail="pending")
    assert isinstance(timer, StartTimer)
    assert (timer.purpose, timer.due_at_ms) == ("wait_check", d.now_ms + 300_000)
    assert d.state.status is TaskStatus.WAITING
    assert d.state.current is not None
    assert (d.state.current.checks, d.state.current.timer_id) == (1, timer.timer_id)
    (check,) = d.fire(advance_ms=300_000)
    assert isinstance(check, RunCheck)
    assert (check.check_number, check.attempt) == (2, 1)
    assert check.command_id == check.idempotency_key == "t1/ci/1/check-2"
    assert d.state.status is TaskStatus.RUNNING


def test_a_passing_check_counts_the_checks_it_took() -> None:
    d = at_ci(wait_workflow())
    d.check(False)
    d.fire()
    d.check(False)
    d.fire()
    commands = d.check(True, detail="all green")
    assert [(c.type, c.step) for c in commands] == [("RunStep", "merge")]
    attempt = d.state.attempts[-1]
    assert (attempt.step, attempt.kind, attempt.outcome, attempt.checks, attempt.actor) == (
        "ci", "wait", Outcome.PASSED, 3, "check:ci"
    )


@pytest.mark.parametrize("max_checks", [1, 2, 4])
def test_the_last_allowed_failed_check_takes_the_failure_route(max_checks: int) -> None:
    d = at_ci(wait_workflow(max_checks))
    for _ in range(max_checks - 1):
        d.check(False)
        d.fire()
    assert d.check(False, detail="red") == []
    assert d.state.status is TaskStatus.HALTED
    attempt = d.state.attempts[-1]
    assert (attempt.outcome, attempt.reason, attempt.checks) == (
        Outcome.FAILED, "wait_exhausted", max_checks
    )
    assert attempt.detail == f"{max_checks} of {max_checks} checks failed; last: red"
    assert d.state.halt is not None
    assert d.state.halt.reason == "wait_exhausted"


def test_an_exhausted_wait_can_loop_back() -> None:
    d = at_ci(wait_workflow(1, {"loop_back": "build", "max_attempts": 2}))
    commands = d.check(False)
    assert [(c.type, c.step, c.attempt) for c in commands] == [("RunStep", "build", 2)]
    (check,) = d.report()
    assert isinstance(check, RunCheck)
    assert (check.attempt, check.check_number) == (2, 1)  # a fresh budget of checks


def test_an_exhausted_advisory_wait_continues() -> None:
    d = at_ci(wait_workflow(1, "continue"))
    commands = d.check(False)
    assert [(c.type, c.step) for c in commands] == [("RunStep", "merge")]


def test_stale_check_reports_and_timers_are_refused() -> None:
    d = at_ci(wait_workflow())
    first = d.make(CheckReported, command_id="t1/ci/1/check-1", passed=False)
    d.apply(first)
    with pytest.raises(IllegalEventError):  # a duplicate while the task sleeps
        d.apply(d.make(CheckReported, command_id="t1/ci/1/check-1", passed=True))
    with pytest.raises(IllegalEventError, match="not the timer the task waits on"):
        d.apply(d.make(TimerFired, timer_id="t1/ci/1/timer-9"))
    d.fire()
    with pytest.raises(IllegalEventError, match="is not the check in flight"):
        d.apply(d.make(CheckReported, command_id="t1/ci/1/check-1", passed=True))
    with pytest.raises(IllegalEventError):  # the timer already fired
        d.apply(d.make(TimerFired, timer_id="t1/ci/1/timer-1"))


# --- operator actions ------------------------------------------------------------------


def halted_at_review() -> Driver:
    d = Driver(fix_bug())
    d.submit()
    for _ in range(3):
        d.report()
        d.report()
        d.report(verdict={"approved": False, "must_fix": ["rename"]})
    assert d.state.status is TaskStatus.HALTED
    return d


def test_a_retry_reruns_the_halted_step_in_a_new_epoch_with_the_reason_recorded() -> None:
    d = halted_at_review()
    commands = d.retry("olga", "the reviewer model was misconfigured")
    assert [(c.type, c.step, c.attempt) for c in commands] == [("RunStep", "review", 4)]
    assert d.state.status is TaskStatus.RUNNING
    assert (d.state.epoch, d.state.halt) == (1, None)
    assert d.state.operator_actions == (
        OperatorAction("retry", "olga", "the reviewer model was misconfigured", d.now_ms,
                       "review"),
    )


def test_a_retry_gives_the_loop_a_fresh_budget() -> None:
    d = halted_at_review()
    d.retry()
    for _ in range(2):  # review attempts 4 and 5 fail and loop back
        d.report(verdict={"approved": False})
        assert d.state.status is TaskStatus.RUNNING
        d.report()  # implement
        d.report()  # test
    d.report(verdict={"approved": False})  # review attempt 6: the third failure this epoch
    assert d.state.status is TaskStatus.HALTED
    assert [a.number for a in d.state.attempts_of("review", epoch=0)] == [1, 2, 3]
    assert [a.number for a in d.state.attempts_of("review", epoch=1)] == [4, 5, 6]


@pytest.mark.parametrize(("actor", "reason"), [("", "why"), ("olga", "")])
def test_operator_actions_need_a_name_and_a_reason(actor: str, reason: str) -> None:
    d = halted_at_review()
    before = d.state
    with pytest.raises(IllegalEventError, match="needs an operator name and a reason"):
        d.retry(actor, reason)
    with pytest.raises(IllegalEventError, match="needs an operator name and a reason"):
        d.cancel(actor, reason)
    assert d.state is before


def test_only_a_halted_task_can_be_retried() -> None:
    d = Driver(fix_bug())
    d.submit()
    with pytest.raises(IllegalEventError, match="TaskRetried is not allowed while the task is"):
        d.retry()


@pytest.mark.parametrize("where", ["running", "waiting", "awaiting_approval", "halted"])
def test_cancel_stops_a_live_task_for_good(where: str) -> None:
    d = Driver(workflow_from_dict({
        "workflow": "w",
        "steps": [
            {"id": "a", "kind": "ai", "owner": "o", "agent": FIXER},
            {"id": "ci", "kind": "wait", "owner": "o", "check": {"command": ["ci"]},
             "every": "1m", "max_checks": 2},
            {"id": "ok", "kind": "human", "owner": "o", "approvers": {"role": "r"}},
        ],
    }))
    d.submit()
    if where == "halted":
        d.report(ok=False, error="timeout")
    if where in ("waiting", "awaiting_approval"):
        d.report()
        d.check(where == "awaiting_approval")
    assert d.state.status.value == where
    assert d.cancel("olga", "customer withdrew") == []
    assert d.state.status is TaskStatus.CANCELLED
    assert d.state.current is None
    assert d.state.operator_actions[-1].action == "cancel"
    assert d.state.operator_actions[-1].reason == "customer withdrew"
    with pytest.raises(IllegalEventError):
        d.retry()
